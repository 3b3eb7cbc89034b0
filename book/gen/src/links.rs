//! A link check over the built HTML book: every relative link must name a file that
//! exists, and every `#anchor` an `id` in that file. Links outside the book must start
//! with one of [`OUTSIDE_ROUTES`] (the web app served beside it); external `http(s)`
//! links are counted, not fetched.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Component, Path, PathBuf};

/// Paths outside the book that a page may link to, relative to the book's root:
/// `scripts/serve.sh` serves the web app at `/` (one page; its routes are `#/...`
/// fragments) and the book at `/book/`.
pub const OUTSIDE_ROUTES: &[&str] = &["../index.html"];

/// What the check found.
#[derive(Debug, Default)]
pub struct LinkReport {
    /// Pages read.
    pub pages: usize,
    /// Internal links checked.
    pub checked: usize,
    /// External links seen (not fetched).
    pub external: usize,
    /// `page: link (why)` for each broken link.
    pub broken: Vec<String>,
}

/// Values of `attr="..."` in `html`.
fn attr_values<'a>(html: &'a str, attr: &str) -> Vec<&'a str> {
    let pat = format!(" {attr}=\"");
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(i) = rest.find(&pat) {
        rest = &rest[i + pat.len()..];
        if let Some(end) = rest.find('"') {
            out.push(&rest[..end]);
            rest = &rest[end..];
        }
    }
    out
}

/// `a/./b/../c` → `a/c`; `None` if it climbs above the root.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            other => out.push(other),
        }
    }
    Some(out)
}

fn html_files(dir: &Path, root: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            html_files(&path, root, out)?;
        } else if path.extension().is_some_and(|e| e == "html") {
            out.push(path.strip_prefix(root).unwrap_or(&path).to_path_buf());
        }
    }
    Ok(())
}

/// Checks every link of every page under `root` (the `book/book` output directory).
pub fn check(root: &Path) -> std::io::Result<LinkReport> {
    let mut pages = Vec::new();
    html_files(root, root, &mut pages)?;
    pages.sort();
    let mut ids: BTreeMap<PathBuf, BTreeSet<String>> = BTreeMap::new();
    let mut texts = Vec::new();
    for p in &pages {
        let html = fs::read_to_string(root.join(p))?;
        ids.insert(
            p.clone(),
            attr_values(&html, "id")
                .into_iter()
                .map(String::from)
                .collect(),
        );
        texts.push((p.clone(), html));
    }
    let mut report = LinkReport {
        pages: pages.len(),
        ..Default::default()
    };
    for (page, html) in &texts {
        for link in attr_values(html, "href")
            .into_iter()
            .chain(attr_values(html, "src"))
        {
            check_link(root, page, link, &ids, &mut report);
        }
    }
    Ok(report)
}

fn check_link(
    root: &Path,
    page: &Path,
    link: &str,
    ids: &BTreeMap<PathBuf, BTreeSet<String>>,
    report: &mut LinkReport,
) {
    if link.starts_with("http://") || link.starts_with("https://") {
        report.external += 1;
        return;
    }
    if link.starts_with("mailto:") || link.starts_with("javascript:") || link.starts_with("data:") {
        return;
    }
    report.checked += 1;
    let (path, anchor) = link.split_once('#').unwrap_or((link, ""));
    let dir = page.parent().unwrap_or(Path::new(""));
    let target = if path.is_empty() {
        Some(page.to_path_buf())
    } else {
        normalize(&dir.join(path))
    };
    let mut broken = |why: &str| {
        report
            .broken
            .push(format!("{}: {link} ({why})", page.display()))
    };
    let Some(target) = target else {
        let rel = relative_to_root(dir, path);
        if !OUTSIDE_ROUTES.iter().any(|r| rel.starts_with(r)) {
            broken("leaves the book and is not a known route");
        }
        return;
    };
    let file = root.join(&target);
    if !file.exists() {
        broken("no such file");
        return;
    }
    if !anchor.is_empty() && target.extension().is_some_and(|e| e == "html") {
        let known = ids.get(&target).is_some_and(|s| s.contains(anchor));
        if !known {
            broken("no such anchor");
        }
    }
}

/// `path` (relative to a page in `dir`) as a path relative to the book's root, with
/// leading `../` kept: `dir = a`, `path = ../../web/x` → `../web/x`.
fn relative_to_root(dir: &Path, path: &str) -> String {
    let mut depth = dir.components().count();
    let mut rest = path;
    while let Some(r) = rest.strip_prefix("../") {
        if depth == 0 {
            return format!("../{r}");
        }
        depth -= 1;
        rest = r;
    }
    rest.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_are_found_in_order() {
        let html = r#"<a href="a.html#x">A</a> <img src="b.svg"> <h2 id="x">"#;
        assert_eq!(attr_values(html, "href"), vec!["a.html#x"]);
        assert_eq!(attr_values(html, "src"), vec!["b.svg"]);
        assert_eq!(attr_values(html, "id"), vec!["x"]);
    }

    #[test]
    fn paths_normalize_and_escape_the_root() {
        assert_eq!(
            normalize(Path::new("a/./b/../c.html")),
            Some(PathBuf::from("a/c.html"))
        );
        assert_eq!(normalize(Path::new("../web/index.html")), None);
        assert_eq!(relative_to_root(Path::new(""), "../web/x"), "../web/x");
        assert_eq!(relative_to_root(Path::new("a"), "../../web/x"), "../web/x");
        assert_eq!(relative_to_root(Path::new("a"), "../b.html"), "b.html");
    }
}
