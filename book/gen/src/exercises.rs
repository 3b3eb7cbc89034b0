//! Each chapter's exercise list and the puzzle table, from `brrr_exercises` itself,
//! so the book names exactly the exercises that exist.

use crate::md::{Md, page};

/// The file name of a chapter's exercise list: `exercises-regimes.md`.
fn list_name(module: &str) -> String {
    format!(
        "exercises-{}.md",
        module.split("::").next().unwrap_or(module)
    )
}

/// `[`x`]`, rustdoc's link to an item, as plain code: the book has no such link targets.
fn plain_links(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("[`") {
        let after = &rest[i + 1..];
        match after.find("`]") {
            // Only a link without a target: `[`x`](url)` stays as written.
            Some(j) if !after[j + 2..].starts_with('(') && !after[..j + 1].contains('\n') => {
                out.push_str(&rest[..i]);
                out.push_str(&after[..j + 1]);
                rest = &after[j + 2..];
            }
            _ => {
                out.push_str(&rest[..i + 2]);
                rest = &rest[i + 2..];
            }
        }
    }
    out + rest
}

/// A collapsed block: the reader opens it when stuck, not by accident of scrolling.
fn collapsed(summary: &str, body: &str) -> String {
    format!("<details>\n<summary>{summary}</summary>\n\n{body}\n\n</details>\n\n")
}

/// One exercise as its chapter shows it: statement, hint and solution collapsed, and
/// the command that checks it.
fn exercise_section(ex: &brrr_exercises::Exercise) -> String {
    let mut out = format!(
        "### {} (`{}`)\n\n{}\n\n",
        ex.title(),
        ex.name(),
        plain_links(&ex.statement())
    );
    if let Some(hint) = ex.hint() {
        out += &collapsed("Hint", &plain_links(&hint));
    }
    // `ignore`: a solution is a piece of its exercise's module (it names `super::`),
    // which `mdbook test` cannot compile on its own.
    out += &collapsed(
        "Solution",
        &format!("```rust,ignore\n{}\n```", ex.solution.trim_end()),
    );
    out += &format!(
        "Write it in `{}`, then check it with `cargo run -p brrr-exercises -- {}`.\n\n",
        ex.file(),
        ex.module
    );
    out
}

/// One page per chapter, its exercises in book order.
fn exercise_lists() -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for ex in brrr_exercises::all() {
        let name = list_name(ex.module);
        let section = exercise_section(&ex);
        match out.iter_mut().find(|(n, _)| *n == name) {
            Some((_, body)) => body.push_str(&section),
            None => out.push((name, section)),
        }
    }
    out.into_iter()
        .map(|(name, body)| {
            let chapter = name
                .trim_start_matches("exercises-")
                .trim_end_matches(".md")
                .to_string();
            let text = format!(
                "{body}Check the whole chapter with `cargo run -p brrr-exercises -- {chapter}::` \
                 (every exercise: `cargo run -p brrr-exercises`; the first build takes a few \
                 minutes).\n"
            );
            (name, page(&text))
        })
        .collect()
}

/// The puzzles: what each computes, how it is launched and its budget of global
/// accesses per invocation.
fn puzzle_table() -> String {
    let mut t = Md::new(&[
        "puzzle",
        "computes",
        "workgroup size",
        "workgroups",
        "invocations",
        "budget (reads / writes per invocation)",
    ])
    .left(&[1]);
    for p in brrr_exercises::puzzles::all() {
        let [x, y, z] = p.workgroup_size;
        let [gx, gy, gz] = p.workgroups;
        t.row(vec![
            format!("`{}` {}", p.id, p.title),
            p.task.to_string(),
            format!("{x} × {y} × {z}"),
            format!("{gx} × {gy} × {gz}"),
            (x * y * z * gx * gy * gz).to_string(),
            format!("{} / {}", p.budget.reads, p.budget.writes),
        ]);
    }
    let tips: String = brrr_exercises::puzzles::all()
        .iter()
        .map(|p| format!("- `{}`: {}\n", p.id, p.tip))
        .collect();
    page(&format!(
        "{}\nEach puzzle is a file `exercises/src/puzzles/wgsl/ID.wgsl` (for example \
         `{}`).\n\n<details>\n<summary>A tip per puzzle, for when you are stuck</summary>\n\n{tips}\n</details>\n",
        t.render(),
        brrr_exercises::puzzles::all()
            .first()
            .map(|p| p.file())
            .unwrap_or_default()
    ))
}

/// The files.
pub fn files() -> Vec<(String, String)> {
    let mut f = exercise_lists();
    f.push(("puzzles.md".into(), puzzle_table()));
    f
}

#[cfg(test)]
mod tests {
    /// The runner lists chapters in the order the book's table of contents has them.
    #[test]
    fn exercises_follow_the_book_order() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../src/SUMMARY.md");
        let summary = std::fs::read_to_string(path).unwrap();
        let mut at = 0;
        for ex in brrr_exercises::all() {
            let title = format!("[{}]", ex.chapter);
            let found = summary
                .find(&title)
                .unwrap_or_else(|| panic!("{} is not a chapter of SUMMARY.md", ex.chapter));
            assert!(found >= at, "{} comes earlier in the book", ex.module);
            at = found;
        }
    }

    /// A rustdoc link without a target reads as plain code in the book.
    #[test]
    fn doc_links_become_code() {
        assert_eq!(
            super::plain_links("see [`Global::a`] and [`x`](y)"),
            "see `Global::a` and [`x`](y)"
        );
    }
}
