//! A check of the figures the README quotes: every number in the figure column of its
//! "Headline figures" table must appear, as a number, in the section its source link
//! points at (a file, and the heading its `#anchor` names). A figure re-measured in the
//! source but not in the README, or a link to a heading that moved, fails the check. The
//! README also stays under [`MAX_LINES`] lines, the two commands first.

use std::path::Path;

/// The README is a newcomer's first five minutes.
pub const MAX_LINES: usize = 200;

/// The section of the README whose table is checked.
const SECTION: &str = "## Headline figures";

/// One quoted figure that its source does not hold, or a row that cannot be checked.
pub type Problem = String;

/// Checks the README at `path`; returns the rows checked and every problem.
pub fn check(path: &Path) -> Result<(usize, Vec<Problem>), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let root = path.parent().unwrap_or(Path::new("."));
    let mut problems = Vec::new();
    let lines = text.lines().count();
    if lines >= MAX_LINES {
        problems.push(format!("{lines} lines; keep it under {MAX_LINES}"));
    }
    let rows = figure_rows(&text).ok_or(format!("{}: no `{SECTION}` table", path.display()))?;
    for (figure, link) in &rows {
        let Some(link) = link else {
            problems.push(format!("{figure:?}: no source link"));
            continue;
        };
        let (file, anchor) = link.split_once('#').unwrap_or((link, ""));
        let source = match std::fs::read_to_string(root.join(file)) {
            Ok(s) => s,
            Err(e) => {
                problems.push(format!("{link}: {e}"));
                continue;
            }
        };
        let Some(section) = section_of(&source, anchor) else {
            problems.push(format!("{link}: no heading with the anchor #{anchor}"));
            continue;
        };
        for n in numbers(figure) {
            if !numbers(section).contains(&n) {
                problems.push(format!("{n} (in {figure:?}) is not in {link}"));
            }
        }
    }
    Ok((rows.len(), problems))
}

/// `(figure cell, source link)` of each body row of the headline table.
fn figure_rows(readme: &str) -> Option<Vec<(String, Option<String>)>> {
    let start = readme.find(SECTION)?;
    let body = &readme[start + SECTION.len()..];
    let body = &body[..body.find("\n## ").unwrap_or(body.len())];
    let rows = body
        .lines()
        .filter(|l| l.starts_with('|'))
        .skip(2) // the header and the separator
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            let figure = cells.get(1).copied().unwrap_or_default().to_string();
            let link = cells.get(2).and_then(|c| link_target(c));
            (figure, link)
        })
        .collect();
    Some(rows)
}

/// The target of the first markdown link `[text](target)` in `cell`.
fn link_target(cell: &str) -> Option<String> {
    let open = cell.find("](")? + 2;
    let close = cell[open..].find(')')? + open;
    Some(cell[open..close].to_string())
}

/// The text under the heading whose GitHub anchor is `anchor`, up to the next heading
/// of the same or a higher level; the whole file for an empty anchor.
fn section_of<'a>(source: &'a str, anchor: &str) -> Option<&'a str> {
    if anchor.is_empty() {
        return Some(source);
    }
    let mut offset = 0;
    let mut found: Option<(usize, usize)> = None; // (start, level)
    for line in source.split_inclusive('\n') {
        let level = line.bytes().take_while(|&b| b == b'#').count();
        if level > 0 && line.as_bytes().get(level) == Some(&b' ') {
            if let Some((start, l)) = found {
                if level <= l {
                    return Some(&source[start..offset]);
                }
            } else if slug(&line[level..]) == anchor {
                found = Some((offset, level));
            }
        }
        offset += line.len();
    }
    found.map(|(start, _)| &source[start..])
}

/// GitHub's heading anchor: lower case, letters, digits, `-` and `_` kept, spaces to
/// `-`, everything else dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The numbers in `text`, thousands separators dropped: `22,437` → `22437`, `1.47×` →
/// `1.47`, `60%` → `60`. A number ends at a character that cannot continue it.
fn numbers(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts = chars[i].is_ascii_digit() && (i == 0 || !is_word(chars[i - 1]));
        if !starts {
            i += 1;
            continue;
        }
        let mut n = String::new();
        while i < chars.len() {
            let c = chars[i];
            let next_digit = chars.get(i + 1).is_some_and(char::is_ascii_digit);
            if c.is_ascii_digit() || (c == '.' && next_digit) {
                n.push(c);
            } else if !(c == ',' && thousands(&chars[i + 1..])) {
                break;
            }
            i += 1;
        }
        out.push(n);
    }
    out
}

/// Whether `after` (what follows a comma) is a group of three digits that ends there:
/// `22,437` is one number, `1,2` and `1, 2` are two.
fn thousands(after: &[char]) -> bool {
    after.len() >= 3
        && after[..3].iter().all(char::is_ascii_digit)
        && after.get(3).is_none_or(|c| !c.is_ascii_digit())
}

/// Characters that make a digit part of a word (`H100`, `fp32`, `v2`), not a number.
fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '.'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_read_as_quoted() {
        assert_eq!(
            numbers("loss 1.921 against 3.041; 22,437 tokens/s, 60% of peak, 1.47× eager"),
            ["1.921", "3.041", "22437", "60", "1.47"]
        );
        // Digits inside words are not figures; a list's commas separate numbers.
        assert_eq!(
            numbers("an H100, fp32, 4096³ and 1, 2, 3"),
            ["4096", "1", "2", "3"]
        );
    }

    #[test]
    fn anchors_follow_github() {
        assert_eq!(
            slug(" One engine for every layout (--dp, --tp, --sp, --pp)"),
            "one-engine-for-every-layout---dp---tp---sp---pp"
        );
        assert_eq!(
            slug("Against PyTorch on the CPU (`bench/cpu.sh`)"),
            "against-pytorch-on-the-cpu-benchcpush"
        );
        let doc = "# A\nx 1\n## B c\ny 2\n### D\nz 3\n## E\nw 4\n";
        assert_eq!(section_of(doc, "b-c"), Some("## B c\ny 2\n### D\nz 3\n"));
        assert_eq!(section_of(doc, "e"), Some("## E\nw 4\n"));
        assert_eq!(section_of(doc, "nowhere"), None);
    }

    #[test]
    fn a_stale_figure_is_named() {
        let dir = tempdir();
        std::fs::write(
            dir.join("src.md"),
            "# Runs\n## The run\nloss 1.921 at 22,437 tok/s\n",
        )
        .unwrap();
        let readme = |figure: &str| {
            format!(
                "# x\n{SECTION}\n\n| what | figure | source |\n|---|---|---|\n\
                 | run | {figure} | [run](src.md#the-run) |\n\n## Next\n"
            )
        };
        std::fs::write(dir.join("README.md"), readme("loss 1.921, 22,437 tokens/s")).unwrap();
        assert_eq!(check(&dir.join("README.md")).unwrap(), (1, vec![]));
        std::fs::write(dir.join("README.md"), readme("loss 1.92, 22,437 tokens/s")).unwrap();
        let (_, problems) = check(&dir.join("README.md")).unwrap();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].starts_with("1.92 "), "{problems:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn this_readme_quotes_its_sources() {
        let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
        let (rows, problems) = check(&readme).unwrap();
        assert!(rows >= 5, "{rows} rows");
        assert!(problems.is_empty(), "{problems:#?}");
    }

    fn tempdir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("brrr-readme-check-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
