//! Catching what a GPU would: shared-memory races and barriers in divergent code.
//!
//! A kernel that forgets a `workgroupBarrier()` between writing shared memory and
//! reading it back is wrong, yet often gives the right answer: lavapipe runs a
//! workgroup's invocations in lockstep, and a small GPU workgroup may happen to as well.
//! So the answer alone cannot catch it; the order the kernel promises can. [`instrument`]
//! rewrites the WGSL so that every element access of a `var<workgroup>` array, and every
//! barrier, is logged (which invocation, how many barriers it has passed, which array
//! and element, read or write), and [`find_races`] checks the log as the WGSL memory
//! model does (and as CUDA's `compute-sanitizer --tool racecheck` does for shared
//! memory): between two barriers, an element written by one invocation must not be read
//! or written by another of its workgroup. It also checks that every invocation of a
//! workgroup passes the same number of barriers, since a barrier some invocations skip
//! (inside `if (i < stride)`) is undefined behaviour, a hang on some GPUs.
//!
//! Plain Rust, no GPU, like [`super::count`]: the native checker runs the rewritten
//! kernel through wgpu.

use super::count::{Accesses, Assign, is_ident, numbered_entry, rewrite, row_width};
use super::data::Puzzle;
use std::collections::BTreeMap;

/// Log entries the buffer holds; a kernel that makes more accesses than this is not
/// checked (the puzzles make at most a few hundred).
pub const CAPACITY: usize = 1 << 14;

/// A kernel rewritten to log its shared-memory accesses and barriers.
#[derive(Debug, Clone, PartialEq)]
pub struct Instrumented {
    /// The rewritten WGSL.
    pub wgsl: String,
    /// The binding of the log (`array<atomic<u32>>` of [`Instrumented::log_len`]), in
    /// group 0 after the output.
    pub binding: u32,
    /// u32s in the log buffer: a count, then 4 per entry.
    pub log_len: usize,
    /// The workgroup arrays, by the id the log names them with.
    pub arrays: Vec<String>,
}

/// `var<workgroup> name: array<…>` declarations, in order.
fn workgroup_arrays(source: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find("var<workgroup>") {
        rest = &rest[at + "var<workgroup>".len()..];
        let name: String = rest
            .trim_start()
            .chars()
            .take_while(|&c| is_ident(c))
            .collect();
        if !name.is_empty() {
            names.push(name);
        }
    }
    names
}

/// Rewrites `source` (a kernel for `puzzle`) to log its workgroup-memory accesses and
/// barriers; `Err` when it has no workgroup arrays (nothing to check) or no entry point.
pub fn instrument(puzzle: &Puzzle, source: &str) -> Result<Instrumented, String> {
    let arrays = workgroup_arrays(source);
    if arrays.is_empty() {
        return Err("the kernel declares no `var<workgroup>` arrays".into());
    }
    let binding = puzzle.inputs.len() as u32 + 1;
    let (head, body_open, set_inv) = numbered_entry(puzzle, source)?;
    let id = |name: &str| arrays.iter().position(|a| a == name).unwrap_or(0);
    let emit = |name: &str, index: &str, kind: Assign| {
        let k = id(name);
        let (read, write) = (
            format!("brrr_wg_read({k}u, u32({index})); "),
            format!("brrr_wg_write({k}u, u32({index})); "),
        );
        match kind {
            Assign::Plain => (write, format!("{name}[{index}]")),
            Assign::Compound => (read + &write, format!("{name}[{index}]")),
            Assign::None => (String::new(), format!("brrr_wg_load_{name}(u32({index}))")),
        }
    };
    let logged = Accesses {
        names: arrays.clone(),
        emit: &emit,
    };
    let barriers = |t: String| t.replace("workgroupBarrier()", "brrr_barrier()");
    let head = barriers(rewrite(&head, &logged));
    let body = barriers(rewrite(&source[body_open..], &logged));
    let wgsl = format!(
        "{head}{{{set_inv}{}\n{}",
        &body[1..],
        helpers(source, &arrays, binding)
    );
    Ok(Instrumented {
        wgsl,
        binding,
        log_len: 1 + 4 * CAPACITY,
        arrays,
    })
}

/// What a log entry records.
const READ: u32 = 0;
const WRITE: u32 = 1;
const BARRIER: u32 = 2;

/// The log, the invocation's index and barrier count, the logging functions, one load
/// per workgroup array, and the barrier that counts.
fn helpers(source: &str, arrays: &[String], binding: u32) -> String {
    let mut s = format!(
        "\n// Added to check shared-memory races (brrr_exercises::puzzles::race).\n\
         @group(0) @binding({binding}) var<storage, read_write> brrr_log: array<atomic<u32>>;\n\
         var<private> brrr_inv: u32;\n\
         var<private> brrr_epoch: u32;\n\
         fn brrr_note(what: u32, array: u32, i: u32) {{\n\
         \x20   let k = atomicAdd(&brrr_log[0], 1u);\n\
         \x20   if (k < {CAPACITY}u) {{\n\
         \x20       atomicStore(&brrr_log[1u + 4u * k], brrr_inv);\n\
         \x20       atomicStore(&brrr_log[2u + 4u * k], brrr_epoch);\n\
         \x20       atomicStore(&brrr_log[3u + 4u * k], (array << 2u) | what);\n\
         \x20       atomicStore(&brrr_log[4u + 4u * k], i);\n\
         \x20   }}\n\
         }}\n\
         fn brrr_wg_read(array: u32, i: u32) {{ brrr_note({READ}u, array, i); }}\n\
         fn brrr_wg_write(array: u32, i: u32) {{ brrr_note({WRITE}u, array, i); }}\n\
         fn brrr_barrier() {{ brrr_note({BARRIER}u, 0u, 0u); brrr_epoch += 1u; workgroupBarrier(); }}\n"
    );
    for (k, name) in arrays.iter().enumerate() {
        let elem = element_type(source, name).unwrap_or_else(|| "f32".into());
        s.push_str(&format!(
            "fn brrr_wg_load_{name}(i: u32) -> {elem} {{ brrr_wg_read({k}u, i); return {name}[i]; }}\n"
        ));
    }
    s
}

/// The element type of the workgroup array `name` (`array<f32, 8>` → `f32`).
fn element_type(source: &str, name: &str) -> Option<String> {
    let decl = source.find(&format!("var<workgroup> {name}"))?;
    let t = &source[decl..];
    let open = t.find("array<")? + "array<".len();
    let end = t[open..].find([',', '>'])?;
    Some(t[open..open + end].trim().to_string())
}

/// One logged event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Event {
    inv: usize,
    epoch: u32,
    what: u32,
    array: usize,
    index: u32,
}

/// Checks the log of an [`Instrumented`] run: `Ok` when every invocation of each
/// workgroup passed the same barriers and no element of shared memory was written by
/// one invocation and touched by another between two barriers; `Err` names the first
/// problem, its invocations, array element and barrier interval.
pub fn find_races(puzzle: &Puzzle, inst: &Instrumented, log: &[u32]) -> Result<(), String> {
    let n = log.first().copied().unwrap_or(0) as usize;
    if n > CAPACITY {
        return Err(format!(
            "the kernel made {n} shared-memory accesses, more than the checker logs ({CAPACITY})"
        ));
    }
    if log.len() < 1 + 4 * n {
        return Err(format!(
            "the log holds {} values for {n} entries",
            log.len()
        ));
    }
    let events: Vec<Event> = (0..n)
        .map(|k| {
            let e = &log[1 + 4 * k..5 + 4 * k];
            Event {
                inv: e[0] as usize,
                epoch: e[1],
                what: e[2] & 3,
                array: (e[2] >> 2) as usize,
                index: e[3],
            }
        })
        .collect();
    uniform_barriers(puzzle, &events)?;
    no_conflicts(puzzle, inst, &events)
}

/// The workgroup of invocation `inv` (its index in dispatch order) and its local index.
fn workgroup_of(p: &Puzzle, inv: usize) -> (usize, usize) {
    let width = row_width(p);
    let height = (p.workgroup_size[1] * p.workgroups[1]) as usize;
    let (x, y, z) = (inv % width, (inv / width) % height, inv / (width * height));
    let [wx, wy, wz] = p.workgroup_size.map(|v| v as usize);
    let [gx, gy, _] = p.workgroups.map(|v| v as usize);
    let group = x / wx + gx * (y / wy + gy * (z / wz));
    let local = x % wx + wx * (y % wy + wy * (z % wz));
    (group, local)
}

/// Every invocation of a workgroup passes the same number of barriers.
fn uniform_barriers(p: &Puzzle, events: &[Event]) -> Result<(), String> {
    let invocations = super::count::invocations(p);
    let mut passed = vec![0u32; invocations];
    for e in events.iter().filter(|e| e.what == BARRIER) {
        if let Some(c) = passed.get_mut(e.inv) {
            *c += 1;
        }
    }
    let mut first: BTreeMap<usize, (usize, u32)> = BTreeMap::new();
    for (inv, &count) in passed.iter().enumerate() {
        let (group, _) = workgroup_of(p, inv);
        match first.get(&group) {
            None => {
                first.insert(group, (inv, count));
            }
            Some(&(other, c)) if c != count => {
                return Err(format!(
                    "a workgroupBarrier() in divergent control flow: in workgroup {group}, \
                     invocation {other} passed {c} barriers and invocation {inv} passed \
                     {count}. Every invocation of a workgroup must reach each barrier (move \
                     it out of the `if`); on a GPU this is undefined behaviour, often a hang"
                ));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Between two barriers, no element is written by one invocation of a workgroup and
/// read or written by another.
fn no_conflicts(p: &Puzzle, inst: &Instrumented, events: &[Event]) -> Result<(), String> {
    // (workgroup, barriers passed, array, element) → (writers, readers).
    type Who = (Vec<usize>, Vec<usize>);
    let mut touched: BTreeMap<(usize, u32, usize, u32), Who> = BTreeMap::new();
    for e in events.iter().filter(|e| e.what != BARRIER) {
        let (group, local) = workgroup_of(p, e.inv);
        let who = touched
            .entry((group, e.epoch, e.array, e.index))
            .or_default();
        let list = if e.what == WRITE {
            &mut who.0
        } else {
            &mut who.1
        };
        if !list.contains(&local) {
            list.push(local);
        }
    }
    for ((group, epoch, array, index), (writers, readers)) in touched {
        let Some(&w) = writers.first() else { continue };
        let other = writers.iter().chain(&readers).find(|&&x| x != w).map(|&x| {
            (
                x,
                if writers.contains(&x) {
                    "writes"
                } else {
                    "reads"
                },
            )
        });
        if let Some((x, how)) = other {
            let name = inst.arrays.get(array).map_or("?", String::as_str);
            let between = match epoch {
                0 => "before the first barrier".to_string(),
                e => format!("between barriers {e} and {}", e + 1),
            };
            return Err(format!(
                "a shared-memory race on {name}[{index}] in workgroup {group}, {between}: \
                 invocation {w} writes it and invocation {x} {how} it, in no order the \
                 kernel enforces. A workgroupBarrier() between the write and the other \
                 access orders them (lavapipe may still print the right answer: a GPU \
                 need not)"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::puzzles::all;

    fn puzzle(id: &str) -> Puzzle {
        all().into_iter().find(|p| p.id == id).expect("puzzle")
    }

    /// A log of `events` (inv, epoch, what, array, index).
    fn log(events: &[(u32, u32, u32, u32, u32)]) -> Vec<u32> {
        let mut l = vec![events.len() as u32];
        for &(inv, epoch, what, array, index) in events {
            l.extend([inv, epoch, (array << 2) | what, index]);
        }
        l
    }

    #[test]
    fn accesses_and_barriers_are_logged() {
        let p = puzzle("p10_dot");
        let inst = instrument(&p, p.solution).expect("instrumented");
        assert_eq!(inst.arrays, ["cache"]);
        assert!(
            inst.wgsl
                .contains("brrr_wg_write(0u, u32(i)); cache[i] = a[i] * b[i];")
        );
        assert!(inst.wgsl.contains("brrr_wg_load_cache(u32(i + stride))"));
        assert!(inst.wgsl.contains("brrr_barrier();"));
        assert!(!inst.wgsl[..inst.wgsl.find("// Added").unwrap()].contains("workgroupBarrier"));
    }

    #[test]
    fn a_write_and_another_invocations_read_between_barriers_race() {
        let p = puzzle("p10_dot");
        let inst = instrument(&p, p.solution).unwrap();
        // 0 writes cache[1] and 1 reads it, both before any barrier.
        let racy = log(&[(0, 0, WRITE, 0, 1), (1, 0, READ, 0, 1)]);
        let e = find_races(&p, &inst, &racy).unwrap_err();
        assert!(
            e.contains("cache[1]") && e.contains("before the first barrier"),
            "{e}"
        );
        // A barrier between them (the read in the next interval): ordered.
        let mut events = vec![(0, 0, WRITE, 0, 1), (1, 1, READ, 0, 1)];
        events.extend((0..8).map(|i| (i, 0, BARRIER, 0, 0)));
        find_races(&p, &inst, &log(&events)).expect("ordered by the barrier");
        // One invocation reading what it wrote is no race.
        find_races(&p, &inst, &log(&[(3, 0, WRITE, 0, 3), (3, 0, READ, 0, 3)])).unwrap();
    }

    #[test]
    fn a_barrier_that_some_invocations_skip_is_named() {
        let p = puzzle("p10_dot");
        let inst = instrument(&p, p.solution).unwrap();
        let events: Vec<_> = (0..4).map(|i| (i, 0, BARRIER, 0, 0)).collect();
        let e = find_races(&p, &inst, &log(&events)).unwrap_err();
        assert!(
            e.contains("divergent control flow") && e.contains("workgroup 0"),
            "{e}"
        );
    }

    #[test]
    fn workgroups_are_told_apart() {
        // p13: 4 workgroups of 8 in y; invocation 8 is the first of workgroup 1.
        let p = puzzle("p13_axis_sum");
        assert_eq!(workgroup_of(&p, 8), (1, 0));
        assert_eq!(workgroup_of(&p, 7), (0, 7));
        let inst = instrument(&p, p.solution).unwrap();
        // The same element in two workgroups is two different memories.
        find_races(&p, &inst, &log(&[(0, 0, WRITE, 0, 0), (8, 0, WRITE, 0, 0)])).unwrap();
    }

    #[test]
    fn a_kernel_without_shared_memory_has_nothing_to_check() {
        let p = puzzle("p01_map");
        assert!(instrument(&p, p.solution).is_err());
    }
}
