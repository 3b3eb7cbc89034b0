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

/// One markdown list per chapter.
fn exercise_lists() -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for ex in brrr_exercises::all() {
        let name = list_name(ex.module);
        let line = format!(
            "- **`{}`**: {}. Edit `{}`.\n",
            ex.name(),
            ex.task,
            ex.file()
        );
        match out.iter_mut().find(|(n, _)| *n == name) {
            Some((_, body)) => body.push_str(&line),
            None => out.push((name, line)),
        }
    }
    out.into_iter()
        .map(|(name, body)| {
            let chapter = name
                .trim_start_matches("exercises-")
                .trim_end_matches(".md")
                .to_string();
            let text = format!(
                "{body}\nCheck them with `cargo run -p brrr-exercises -- {chapter}::` (all \
                 exercises: `cargo run -p brrr-exercises`).\n"
            );
            (name, page(&text))
        })
        .collect()
}

/// The puzzles: what each computes and how it is launched.
fn puzzle_table() -> String {
    let mut t = Md::new(&[
        "puzzle",
        "computes",
        "workgroup size",
        "workgroups",
        "invocations",
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
        ]);
    }
    page(&format!(
        "{}\nEach puzzle is a file `exercises/src/puzzles/wgsl/ID.wgsl` (for example \
         `{}`).\n",
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
