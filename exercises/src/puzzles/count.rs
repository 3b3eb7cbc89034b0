//! Counting each invocation's global-memory reads and writes, by rewriting the kernel.
//!
//! GPU-Puzzles' simulator counts how often each thread touches global memory, because
//! that is the cost the shared-memory puzzles exist to cut. A real GPU has no such
//! counter an application can read, so [`instrument`] rewrites the WGSL: every element
//! access of a storage buffer (`a[i]`, `out[i] = …`, `out[i] += …`) also bumps one of two
//! atomic counters of the invocation that made it, in an extra storage buffer bound after
//! the output. The instrumented kernel computes exactly what the original does; it is run
//! a second time, only for the counts.
//!
//! The rewrite is textual, which is enough for the puzzles' kernels: accesses written as
//! `name[index]` on a buffer declared `var<storage, …> name`. What it cannot see (a
//! pointer `&a[i]` passed to a function, an assignment in a `for` header) is left
//! uncounted, or fails to compile, in which case the page and the checker say the counts
//! are unavailable and the puzzle itself is unaffected.
//!
//! Plain Rust, no GPU: this module compiles for wasm32 and both the page and the native
//! checker use it.

use super::data::{Budget, Puzzle};

/// A kernel rewritten to count, and how to read its counters back.
#[derive(Debug, Clone, PartialEq)]
pub struct Instrumented {
    /// The rewritten WGSL.
    pub wgsl: String,
    /// The binding of the counter buffer (`array<atomic<u32>>`, two per invocation:
    /// reads then writes), in group 0 after the output.
    pub binding: u32,
    /// Invocations in the dispatch; the counter buffer holds `2 * invocations` u32s.
    pub invocations: usize,
}

/// Global-memory accesses per invocation, in dispatch order (x fastest, then y, then z,
/// over the whole grid).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessCounts {
    /// Invocations in a row of the grid (workgroup size × workgroups, in x).
    pub width: usize,
    /// Element reads of storage buffers, per invocation.
    pub reads: Vec<u32>,
    /// Element writes to storage buffers, per invocation (`+=` counts a read and a write).
    pub writes: Vec<u32>,
}

impl AccessCounts {
    /// Splits the counter buffer read back from an [`Instrumented`] run.
    pub fn from_counters(puzzle: &Puzzle, counters: &[u32]) -> Result<Self, String> {
        let n = invocations(puzzle);
        if counters.len() != 2 * n {
            return Err(format!(
                "the counter buffer has {} values, expected 2 per invocation ({})",
                counters.len(),
                2 * n
            ));
        }
        Ok(AccessCounts {
            width: row_width(puzzle),
            reads: counters.iter().step_by(2).copied().collect(),
            writes: counters.iter().skip(1).step_by(2).copied().collect(),
        })
    }

    /// Total reads of all invocations.
    pub fn total_reads(&self) -> u64 {
        self.reads.iter().map(|&r| u64::from(r)).sum()
    }

    /// Total writes of all invocations.
    pub fn total_writes(&self) -> u64 {
        self.writes.iter().map(|&w| u64::from(w)).sum()
    }

    /// The first invocation that made more global accesses than `budget` allows, as a
    /// sentence for the reader; `None` when every invocation kept to it.
    pub fn over_budget(&self, budget: Budget) -> Option<String> {
        let over = |kind: &str, counts: &[u32], allowed: u32| {
            let (i, &n) = counts.iter().enumerate().find(|(_, n)| **n > allowed)?;
            Some(format!(
                "invocation {i} made {n} global {kind}, over the budget of {allowed} per \
                 invocation: keep what several invocations need in shared memory \
                 (`var<workgroup>`), or a value you need twice in a local"
            ))
        };
        over("reads", &self.reads, budget.reads)
            .or_else(|| over("writes", &self.writes, budget.writes))
    }

    /// One sentence: totals and the busiest invocation.
    pub fn summary(&self) -> String {
        let max_r = self.reads.iter().max().copied().unwrap_or(0);
        let max_w = self.writes.iter().max().copied().unwrap_or(0);
        format!(
            "{} invocations made {} global reads and {} global writes; \
             at most {max_r} reads and {max_w} writes in one invocation.",
            self.reads.len(),
            self.total_reads(),
            self.total_writes()
        )
    }
}

/// Invocations a puzzle dispatches.
pub fn invocations(p: &Puzzle) -> usize {
    p.workgroup_size
        .iter()
        .chain(&p.workgroups)
        .map(|&v| v as usize)
        .product()
}

pub(super) fn row_width(p: &Puzzle) -> usize {
    (p.workgroup_size[0] as usize) * (p.workgroups[0] as usize)
}

/// The kernel up to its entry point's body, with a `global_invocation_id` parameter
/// added where it has none; where the body opens (its `{`); and the statement that sets
/// `brrr_inv`, the invocation's index in dispatch order, to put first in the body.
pub(super) fn numbered_entry(
    puzzle: &Puzzle,
    source: &str,
) -> Result<(String, usize, String), String> {
    let (body_open, gid) = entry_point(source)?;
    let width = row_width(puzzle);
    let height = (puzzle.workgroup_size[1] as usize) * (puzzle.workgroups[1] as usize);
    let gid_name = gid.clone().unwrap_or_else(|| "brrr_gid".to_string());
    let mut head = source[..body_open].to_string();
    if gid.is_none() {
        let at = head.find("fn main(").ok_or("no `fn main(`")? + "fn main(".len();
        head.insert_str(at, "@builtin(global_invocation_id) brrr_gid: vec3<u32>, ");
    }
    let set_inv = format!(
        "\n    brrr_inv = {g}.x + {g}.y * {width}u + {g}.z * {plane}u;",
        g = gid_name,
        plane = width * height
    );
    Ok((head, body_open, set_inv))
}

/// A storage buffer the kernel declares: its name and element type.
#[derive(Debug, Clone, PartialEq)]
struct StorageVar {
    name: String,
    elem: String,
}

/// Rewrites `source` (a kernel for `puzzle`) so that it counts its global-memory
/// accesses; `Err` says why it cannot (no `fn main(`, no storage buffers).
pub fn instrument(puzzle: &Puzzle, source: &str) -> Result<Instrumented, String> {
    let vars = storage_vars(source);
    if vars.is_empty() {
        return Err("the kernel declares no `var<storage, …>` buffers".into());
    }
    let binding = puzzle.inputs.len() as u32 + 1;
    let (head, body_open, set_inv) = numbered_entry(puzzle, source)?;
    let counted = counting(&vars);
    let head = rewrite(&head, &counted);
    let body = rewrite(&source[body_open..], &counted);
    let wgsl = format!(
        "{head}{{{set_inv}{}\n{}",
        &body[1..],
        helpers(&vars, binding)
    );
    Ok(Instrumented {
        wgsl,
        binding,
        invocations: invocations(puzzle),
    })
}

/// `var<storage, …> name: array<T>` declarations.
fn storage_vars(source: &str) -> Vec<StorageVar> {
    let mut vars = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find("var<storage") {
        rest = &rest[at..];
        let Some(close) = rest.find('>') else { break };
        let decl = rest[close + 1..].trim_start();
        let name: String = decl.chars().take_while(|&c| is_ident(c)).collect();
        let elem = decl
            .find("array<")
            .filter(|&a| decl[..a].trim_start_matches(name.as_str()).trim() == ":")
            .map(|a| {
                let t = &decl[a + "array<".len()..];
                t[..t.find(['>', ',']).unwrap_or(t.len())]
                    .trim()
                    .to_string()
            });
        if let (false, Some(elem)) = (name.is_empty(), elem) {
            vars.push(StorageVar { name, elem });
        }
        rest = &rest[close..];
    }
    vars
}

/// Where the entry point's body opens (the index of its `{`), and the name of its
/// `global_invocation_id` parameter if it has one.
fn entry_point(source: &str) -> Result<(usize, Option<String>), String> {
    let start = source
        .find("fn main(")
        .ok_or("the kernel has no `fn main(`")?;
    let open = source[start..]
        .find('{')
        .map(|o| start + o)
        .ok_or("`fn main` has no body")?;
    let sig = &source[start..open];
    let gid = sig.find("global_invocation_id").map(|at| {
        let after = sig[at..].find(')').map_or("", |c| &sig[at + c + 1..]);
        after
            .trim_start()
            .chars()
            .take_while(|&c| is_ident(c))
            .collect::<String>()
    });
    Ok((open, gid.filter(|g| !g.is_empty())))
}

/// The counter buffer, the invocation's index and one load function per buffer.
fn helpers(vars: &[StorageVar], binding: u32) -> String {
    let mut s = format!(
        "\n// Added to count global-memory accesses (brrr_exercises::puzzles::count).\n\
         @group(0) @binding({binding}) var<storage, read_write> brrr_counts: array<atomic<u32>>;\n\
         var<private> brrr_inv: u32;\n\
         fn brrr_read() {{ atomicAdd(&brrr_counts[2u * brrr_inv], 1u); }}\n\
         fn brrr_write() {{ atomicAdd(&brrr_counts[2u * brrr_inv + 1u], 1u); }}\n"
    );
    for v in vars {
        s.push_str(&format!(
            "fn brrr_load_{n}(i: u32) -> {t} {{ brrr_read(); return {n}[i]; }}\n",
            n = v.name,
            t = v.elem
        ));
    }
    s
}

pub(super) fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// What an element access of one of `names` becomes: `emit(name, index, kind)` gives
/// the text to insert before the statement it is in, and the text replacing it (`index`
/// already rewritten).
pub(super) struct Accesses<'a> {
    pub(super) names: Vec<String>,
    pub(super) emit: &'a dyn Fn(&str, &str, Assign) -> (String, String),
}

/// Storage-buffer accesses that count: a read becomes a counted load, a write counts
/// before its statement.
fn counting(vars: &[StorageVar]) -> Accesses<'static> {
    Accesses {
        names: vars.iter().map(|v| v.name.clone()).collect(),
        emit: &|name, index, kind| match kind {
            Assign::Plain => ("brrr_write(); ".into(), format!("{name}[{index}]")),
            Assign::Compound => (
                "brrr_read(); brrr_write(); ".into(),
                format!("{name}[{index}]"),
            ),
            Assign::None => (String::new(), format!("brrr_load_{name}(u32({index}))")),
        },
    }
}

/// Rewrites every element access of the arrays `a` names in `text`.
pub(super) fn rewrite(text: &str, a: &Accesses) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len() * 2);
    // Where the statement being copied begins in `out` (after indentation and comments),
    // for inserting a write's count in front of it.
    let mut stmt_start = 0;
    let mut at_stmt_start = true;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '/' && chars.get(i + 1) == Some(&'/') {
            let end = (i..chars.len())
                .find(|&j| chars[j] == '\n')
                .unwrap_or(chars.len());
            out.extend(&chars[i..end]);
            i = end;
            if at_stmt_start {
                stmt_start = out.len();
            }
            continue;
        }
        if is_ident(c) && (i == 0 || !(is_ident(chars[i - 1]) || chars[i - 1] == '.')) {
            at_stmt_start = false;
            i = access(&chars, i, a, &mut out, stmt_start);
            continue;
        }
        out.push(c);
        if matches!(c, ';' | '{' | '}') {
            at_stmt_start = true;
        } else if !c.is_whitespace() {
            at_stmt_start = false;
        }
        if at_stmt_start {
            stmt_start = out.len();
        }
        i += 1;
    }
    out
}

/// Copies the identifier at `i` into `out`, rewritten if it is an element access of
/// one of `a`'s arrays; returns where copying goes on.
fn access(chars: &[char], i: usize, a: &Accesses, out: &mut String, stmt_start: usize) -> usize {
    let end = (i..chars.len())
        .find(|&j| !is_ident(chars[j]))
        .unwrap_or(chars.len());
    let name: String = chars[i..end].iter().collect();
    let is_target = a.names.contains(&name);
    let after_amp = prev_non_space(chars, i) == Some('&');
    let sub = if is_target && !after_amp {
        subscript(chars, end)
    } else {
        None
    };
    let Some((index, close)) = sub else {
        out.push_str(&name);
        return end;
    };
    let inner = rewrite(&index, a);
    let (prefix, replacement) = (a.emit)(&name, &inner, assignment_after(chars, close + 1));
    out.insert_str(stmt_start, &prefix);
    out.push_str(&replacement);
    close + 1
}

fn prev_non_space(chars: &[char], i: usize) -> Option<char> {
    chars[..i]
        .iter()
        .rev()
        .find(|c| !c.is_whitespace())
        .copied()
}

/// `[index]` starting at or after `from` (whitespace allowed before it): the index text
/// and the position of the closing bracket.
fn subscript(chars: &[char], from: usize) -> Option<(String, usize)> {
    let open = (from..chars.len()).find(|&j| !chars[j].is_whitespace())?;
    if chars[open] != '[' {
        return None;
    }
    let mut depth = 0usize;
    for (j, &c) in chars.iter().enumerate().skip(open) {
        match c {
            '[' => depth += 1,
            ']' => {
                depth -= 1;
                if depth == 0 {
                    return Some((chars[open + 1..j].iter().collect(), j));
                }
            }
            _ => {}
        }
    }
    None
}

/// How an element access is used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Assign {
    /// Read.
    None,
    /// The target of `=`.
    Plain,
    /// The target of `+=` and the like, or of `++`/`--`: read and written.
    Compound,
}

/// Whether an access ending before `from` is the target of `=`, of a compound
/// assignment (`+=`, `<<=`, …) or an increment, or is read.
fn assignment_after(chars: &[char], from: usize) -> Assign {
    let Some(at) = (from..chars.len()).find(|&j| !chars[j].is_whitespace()) else {
        return Assign::None;
    };
    let next = |k: usize| chars.get(at + k).copied();
    match (next(0), next(1), next(2)) {
        (Some('='), Some('='), _) => Assign::None,
        (Some('='), _, _) => Assign::Plain,
        (Some('+'), Some('+'), _) | (Some('-'), Some('-'), _) => Assign::Compound,
        (Some('<'), Some('<'), Some('=')) | (Some('>'), Some('>'), Some('=')) => Assign::Compound,
        (Some('+' | '-' | '*' | '/' | '%' | '&' | '|' | '^'), Some('='), _) => Assign::Compound,
        _ => Assign::None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::puzzles::all;

    fn puzzle(id: &str) -> Puzzle {
        all().into_iter().find(|p| p.id == id).expect("puzzle")
    }

    #[test]
    fn reads_become_counted_loads_and_writes_count_before_the_statement() {
        let p = puzzle("p01_map");
        let got = rewrite(
            "    out[i] = a[i] + 10.0;\n    out[j] += a[a[j]];\n    let same = a[0] == out[1];",
            &counting(&storage_vars(p.solution)),
        );
        assert_eq!(
            got,
            "    brrr_write(); out[i] = brrr_load_a(u32(i)) + 10.0;\n    \
             brrr_read(); brrr_write(); out[j] += brrr_load_a(u32(brrr_load_a(u32(j))));\n    \
             let same = brrr_load_a(u32(0)) == brrr_load_out(u32(1));"
        );
    }

    #[test]
    fn workgroup_arrays_and_other_names_are_left_alone() {
        let p = puzzle("p08_shared");
        let vars = storage_vars(p.solution);
        let names: Vec<&str> = vars.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["a", "out"]);
        assert_eq!(
            rewrite(
                "cache[local.x] = data[i]; v.a[0] = x.out[1];",
                &counting(&vars)
            ),
            "cache[local.x] = data[i]; v.a[0] = x.out[1];"
        );
    }

    #[test]
    fn the_entry_point_gains_a_global_id_and_sets_the_invocation_index() {
        let p = puzzle("p07_blocks_2d");
        let inst = instrument(&p, p.solution).expect("instrumented");
        assert!(
            inst.wgsl
                .contains("fn main(@builtin(global_invocation_id) brrr_gid: vec3<u32>, ")
        );
        let w = row_width(&p);
        let plane = w * (p.workgroup_size[1] * p.workgroups[1]) as usize;
        assert!(
            inst.wgsl.contains(&format!(
                "brrr_inv = brrr_gid.x + brrr_gid.y * {w}u + brrr_gid.z * {plane}u;"
            )),
            "{}",
            inst.wgsl
        );
        assert_eq!(inst.binding, p.inputs.len() as u32 + 1);
        assert_eq!(inst.invocations, invocations(&p));
    }

    #[test]
    fn a_count_over_the_budget_is_named() {
        let c = AccessCounts {
            width: 3,
            reads: vec![1, 3, 1],
            writes: vec![1, 1, 2],
        };
        let e = c
            .over_budget(Budget {
                reads: 2,
                writes: 2,
            })
            .unwrap();
        assert!(e.starts_with("invocation 1 made 3 global reads"), "{e}");
        let e = c
            .over_budget(Budget {
                reads: 3,
                writes: 1,
            })
            .unwrap();
        assert!(e.starts_with("invocation 2 made 2 global writes"), "{e}");
        assert_eq!(
            c.over_budget(Budget {
                reads: 3,
                writes: 2
            }),
            None
        );
    }

    #[test]
    fn counters_split_into_reads_and_writes() {
        let p = puzzle("p01_map");
        let n = invocations(&p);
        let raw: Vec<u32> = (0..n).flat_map(|i| [i as u32, 1]).collect();
        let c = AccessCounts::from_counters(&p, &raw).expect("counts");
        assert_eq!(c.reads, (0..n as u32).collect::<Vec<_>>());
        assert_eq!(c.writes, vec![1; n]);
        assert!(AccessCounts::from_counters(&p, &raw[1..]).is_err());
    }

    #[test]
    fn a_kernel_without_storage_or_entry_point_is_an_error() {
        let p = puzzle("p01_map");
        assert!(instrument(&p, "fn main() {}").is_err());
        assert!(
            instrument(
                &p,
                "@group(0) @binding(0) var<storage, read> a: array<f32>;"
            )
            .is_err()
        );
    }
}
