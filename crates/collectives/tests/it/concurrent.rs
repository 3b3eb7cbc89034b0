//! Two threads of each rank running collectives at once on different communicators, as
//! `--dp × --tp` does (a data-parallel reduce-scatter on a communicator's background
//! thread while the compute thread runs a tensor-parallel all-reduce): every result is
//! right and nothing hangs, in-process and over sockets.

use brrr_collectives::socket::{SocketOptions, connect};
use brrr_collectives::{Communicator, ReduceOp, run_in_process_with_timeout};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

const ROUNDS: usize = 200;

/// Rank `r` of a 2 × 2 grid: all-reduces over its row on this thread and over its
/// column on a second one, `ROUNDS` each, with no order between the two; checks every
/// sum.
fn rows_and_columns_at_once(world: &Communicator) -> brrr_collectives::Result<()> {
    let r = world.rank();
    let (row, col) = (r / 2, r % 2);
    let rows = world.split(row as u32, col as u32)?;
    let cols = Arc::new(world.split(col as u32, row as u32)?);
    // The column's collectives run on its communicator's background thread.
    let handles = (0..ROUNDS)
        .map(|i| cols.all_reduce_start(vec![(r + i) as f32; 3], ReduceOp::Sum))
        .collect::<brrr_collectives::Result<Vec<_>>>()?;
    for i in 0..ROUNDS {
        let mut x = vec![(r * i) as f32; 5];
        rows.all_reduce(&mut x, ReduceOp::Sum)?;
        // The row holds ranks 2·row and 2·row + 1.
        let want = ((2 * row) * i + (2 * row + 1) * i) as f32;
        assert_eq!(x, vec![want; 5], "rank {r} row round {i}");
    }
    for (i, h) in handles.into_iter().enumerate() {
        // The column holds ranks col and col + 2.
        let want = ((col + i) + (col + 2 + i)) as f32;
        assert_eq!(h.wait()?, vec![want; 3], "rank {r} column round {i}");
    }
    Ok(())
}

#[test]
fn two_threads_per_rank_on_two_communicators_in_process() {
    let out = run_in_process_with_timeout(4, Duration::from_secs(20), rows_and_columns_at_once);
    for (r, o) in out.into_iter().enumerate() {
        o.unwrap_or_else(|e| panic!("rank {r}: {e}"));
    }
}

#[test]
fn two_threads_per_rank_on_two_communicators_over_sockets() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let master = format!("127.0.0.1:{port}");
    let opts = SocketOptions {
        timeout: Duration::from_secs(20),
        connect_timeout: Duration::from_secs(20),
        ..Default::default()
    };
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|r| {
                let (master, opts) = (&master, &opts);
                s.spawn(move || {
                    let link = connect(r, 4, master, opts).unwrap();
                    let world = Communicator::new(Box::new(link), opts.timeout);
                    rows_and_columns_at_once(&world)
                })
            })
            .collect();
        for (r, h) in hs.into_iter().enumerate() {
            h.join()
                .unwrap()
                .unwrap_or_else(|e| panic!("rank {r}: {e}"));
        }
    });
}
