//! The socket transport on loopback: collectives agree with the in-process ones, and a
//! rank whose process ends or stops answering turns into an error on the others.

use brrr_collectives::socket::{SocketOptions, connect};
use brrr_collectives::{
    Algorithm, CollError, Collective, Communicator, ReduceOp, reference_reduce,
};
use std::net::TcpListener;
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs `f` on `n` socket ranks, one thread each.
fn run<T: Send>(n: usize, timeout: Duration, f: impl Fn(Communicator) -> T + Sync) -> Vec<T> {
    let master = format!("127.0.0.1:{}", free_port());
    let opts = SocketOptions {
        timeout,
        connect_timeout: Duration::from_secs(20),
        ..Default::default()
    };
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|r| {
                let (f, master, opts) = (&f, &master, &opts);
                s.spawn(move || {
                    f(Communicator::new(
                        Box::new(connect(r, n, master, opts).unwrap()),
                        timeout,
                    ))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn every_all_reduce_algorithm_over_sockets_matches_the_reference() {
    for n in [1, 3, 4] {
        let data: Vec<Vec<f32>> = (0..n)
            .map(|r| (0..37).map(|i| (i * 7 + r * 3) as f32 * 0.25).collect())
            .collect();
        let want = reference_reduce(&data, ReduceOp::Sum);
        let out = run(n, Duration::from_secs(20), |c| {
            Collective::AllReduce
                .algorithms()
                .into_iter()
                .map(|alg| {
                    let mut b = data[c.rank()].clone();
                    c.all_reduce_with(&mut b, ReduceOp::Sum, alg, 0).unwrap();
                    b
                })
                .collect::<Vec<_>>()
        });
        for per_rank in out {
            for b in per_rank {
                assert_eq!(b, want);
            }
        }
    }
}

#[test]
fn a_closed_rank_and_a_silent_rank_become_errors_within_the_timeout() {
    let timeout = Duration::from_millis(800);
    let t0 = Instant::now();
    let out = run(4, timeout, |c| {
        let mut b = vec![1.0f32; 4096];
        c.all_reduce_with(&mut b, ReduceOp::Sum, Algorithm::Ring, 0)
            .unwrap();
        if c.rank() == 3 {
            drop(c); // its sockets close: the others see the connection end
            return Ok(());
        }
        c.all_reduce_with(&mut b, ReduceOp::Sum, Algorithm::Ring, 0)
    });
    assert!(out[3].is_ok());
    for o in &out[..3] {
        let e = o.as_ref().unwrap_err();
        assert!(
            matches!(
                e,
                CollError::PeerLost { .. }
                    | CollError::PeerAborted { .. }
                    | CollError::Timeout { .. }
            ),
            "{e}"
        );
    }
    assert!(t0.elapsed() < Duration::from_secs(10));

    let out = run(3, timeout, |c| {
        if c.rank() == 0 {
            std::thread::sleep(Duration::from_secs(2)); // alive, silent
            return Ok(());
        }
        let mut b = vec![1.0f32; 16];
        c.all_reduce_with(&mut b, ReduceOp::Sum, Algorithm::Tree, 0)
    });
    let e = out[1].as_ref().unwrap_err().to_string();
    assert!(
        e.contains("rank 0") && (e.contains("within 0.8 s") || e.contains("aborted")),
        "{e}"
    );
}

/// Connections to the rendezvous port that are not ranks (one that sends garbage, one
/// that says nothing, one that closes at once) are dropped; the world still forms.
#[test]
fn stray_connections_to_the_rendezvous_are_dropped() {
    use std::io::Write;
    let port = free_port();
    let master = format!("127.0.0.1:{port}");
    let opts = SocketOptions {
        timeout: Duration::from_secs(20),
        connect_timeout: Duration::from_secs(30),
        ..Default::default()
    };
    let rank = |r: usize| {
        let link = connect(r, 2, &master, &opts).unwrap_or_else(|e| panic!("rank {r}: {e}"));
        let c = Communicator::new(Box::new(link), Duration::from_secs(20));
        let mut b = vec![r as f32 + 1.0; 5];
        c.all_reduce(&mut b, ReduceOp::Sum).unwrap();
        b
    };
    std::thread::scope(|s| {
        let rank0 = s.spawn(|| rank(0));
        // The strays arrive before rank 1 does.
        let dial = || loop {
            if let Ok(c) = std::net::TcpStream::connect(&master) {
                return c;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut garbage = dial();
        garbage.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        let silent = dial();
        drop(dial());
        let rank1 = s.spawn(|| rank(1));
        assert_eq!(rank0.join().unwrap(), vec![3.0; 5]);
        assert_eq!(rank1.join().unwrap(), vec![3.0; 5]);
        drop((garbage, silent));
    });
}
