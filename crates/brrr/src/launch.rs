//! `brrr launch --nproc N -- <brrr command>`: starts `N` copies of this program on this
//! machine with torchrun's environment (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`,
//! `LOCAL_WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`), so that each joins the same world
//! (`brrr_collectives::from_env`). When a rank fails, the others get a grace period to
//! fail on their own (their collectives time out or see the closed connection), then are
//! stopped; the launch fails and says which ranks failed.
//!
//! The ranks live and die with their launcher, as torchrun's do: SIGINT, SIGTERM and
//! SIGHUP to the launcher are forwarded to every rank (which then get the same grace
//! period), and on Linux each rank asks the kernel for SIGTERM when the launcher dies,
//! so even a SIGKILL of the launcher leaves no orphaned rank holding a GPU or a port.

use brrr_backend::{Error, Result};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Flags of `brrr launch`.
#[derive(clap::Args, Debug)]
pub struct LaunchArgs {
    /// Processes (ranks) to start on this machine.
    #[arg(long, default_value_t = 1)]
    pub nproc: usize,
    /// Rendezvous address (rank 0 listens there).
    #[arg(long, default_value = "127.0.0.1")]
    pub master_addr: String,
    /// Rendezvous port (default: a free port).
    #[arg(long)]
    pub master_port: Option<u16>,
    /// Seconds the other ranks get to finish after one fails, before they are killed.
    #[arg(long, default_value_t = 30.0)]
    pub grace_s: f64,
    /// How ranks talk: `auto` is MPI (through `mpirun`) when brrr was built with the
    /// `mpi` feature and `mpirun` is on PATH, sockets otherwise.
    #[arg(long, value_enum, default_value = "auto")]
    pub transport: LaunchTransport,
    /// The brrr command each rank runs (after `--`; a leading `brrr` is optional).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
    pub command: Vec<String>,
}

/// The transport of launched ranks.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaunchTransport {
    /// MPI where built with it and mpirun exists, else sockets.
    Auto,
    /// TCP sockets with a rendezvous on MASTER_ADDR:MASTER_PORT.
    Socket,
    /// `mpirun -np N` (needs the `mpi` feature).
    Mpi,
}

fn mpirun_found() -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("mpirun").is_file()))
}

/// Whether to hand the ranks to mpirun.
fn use_mpi(t: LaunchTransport) -> Result<bool> {
    let built = cfg!(feature = "mpi");
    match t {
        LaunchTransport::Socket => Ok(false),
        LaunchTransport::Auto => Ok(built && mpirun_found()),
        LaunchTransport::Mpi if !built => Err(Error::invalid(
            "launch",
            "--transport mpi: brrr was built without the `mpi` feature",
        )),
        LaunchTransport::Mpi if !mpirun_found() => Err(Error::invalid(
            "launch",
            "--transport mpi: mpirun is not on PATH",
        )),
        LaunchTransport::Mpi => Ok(true),
    }
}

/// Runs the ranks under `mpirun`: OpenMPI starts them and its environment
/// (`OMPI_COMM_WORLD_*`) tells each which rank it is; mpirun itself stops every rank
/// when one fails.
fn run_mpirun(exe: &std::path::Path, nproc: usize, args: &[String]) -> Result<()> {
    let status = Command::new("mpirun")
        .args(["--oversubscribe", "-np", &nproc.to_string()])
        .arg(exe)
        .args(args)
        // OpenMPI refuses to run as root without both (containers and CI often are root).
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .die_with_launcher()
        .status()
        .map_err(|e| Error::io("starting mpirun", e))?;
    if status.success() {
        Ok(())
    } else {
        Err(Error::invalid(
            "launch",
            format!("mpirun failed ({status})"),
        ))
    }
}

fn free_port(addr: &str) -> Result<u16> {
    let l = std::net::TcpListener::bind((addr, 0))
        .map_err(|e| Error::io(format!("finding a free port on {addr}"), e))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| Error::io("finding a free port", e))
}

/// Runs the launch; `Ok` when every rank exited with success.
pub fn run(args: &LaunchArgs) -> Result<()> {
    if args.nproc == 0 || args.nproc > 1024 {
        return Err(Error::invalid(
            "launch",
            format!("--nproc {} (1..=1024)", args.nproc),
        ));
    }
    if !(args.grace_s.is_finite() && args.grace_s >= 0.0) {
        return Err(Error::invalid("launch", "--grace-s must be >= 0"));
    }
    let mut cmd_args = args.command.as_slice();
    if cmd_args.first().map(String::as_str) == Some("brrr") {
        cmd_args = &cmd_args[1..];
    }
    if cmd_args.is_empty() {
        return Err(Error::invalid("launch", "no command after --"));
    }
    let exe = std::env::current_exe().map_err(|e| Error::io("locating the brrr executable", e))?;
    if use_mpi(args.transport)? {
        return run_mpirun(&exe, args.nproc, cmd_args);
    }
    let port = match args.master_port {
        Some(p) => p,
        None => free_port(&args.master_addr)?,
    };
    // Before the first rank starts, so no signal meant for the world ends only us.
    signals::catch_stop_signals();
    let mut children = Vec::new();
    for rank in 0..args.nproc {
        let child = Command::new(&exe)
            .args(cmd_args)
            .env("RANK", rank.to_string())
            .env("WORLD_SIZE", args.nproc.to_string())
            .env("LOCAL_RANK", rank.to_string())
            .env("LOCAL_WORLD_SIZE", args.nproc.to_string())
            .env("MASTER_ADDR", &args.master_addr)
            .env("MASTER_PORT", port.to_string())
            .die_with_launcher()
            .spawn()
            .map_err(|e| Error::io(format!("starting rank {rank}"), e));
        match child {
            Ok(c) => children.push(c),
            Err(e) => {
                kill_all(&mut children);
                return Err(e);
            }
        }
    }
    supervise(children, Duration::from_secs_f64(args.grace_s))
}

fn kill_all(children: &mut [Child]) {
    for c in children {
        // Only our own children, by handle; one that already exited makes this a no-op.
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// Waits for every child; after the first failure, gives the rest `grace` to end.
fn supervise(mut children: Vec<Child>, grace: Duration) -> Result<()> {
    let mut status: Vec<Option<i32>> = vec![None; children.len()];
    let mut first_failure: Option<Instant> = None;
    let mut stopped_by = None;
    loop {
        if let Some(sig) = signals::take_stop_signal() {
            for (rank, c) in children.iter().enumerate() {
                if status[rank].is_none() {
                    signals::forward(c, sig);
                }
            }
            stopped_by = Some(sig);
            first_failure.get_or_insert_with(Instant::now);
        }
        for (rank, c) in children.iter_mut().enumerate() {
            if status[rank].is_none()
                && let Some(s) = c
                    .try_wait()
                    .map_err(|e| Error::io(format!("waiting for rank {rank}"), e))?
            {
                let code = s.code().unwrap_or(-1);
                status[rank] = Some(code);
                if code != 0 && first_failure.is_none() {
                    first_failure = Some(Instant::now());
                }
            }
        }
        if status.iter().all(Option::is_some) {
            break;
        }
        if first_failure.is_some_and(|t| t.elapsed() > grace) {
            for (rank, c) in children.iter_mut().enumerate() {
                if status[rank].is_none() {
                    eprintln!(
                        "launch: stopping rank {rank} ({:.0} s after the first failure)",
                        grace.as_secs_f64()
                    );
                    let _ = c.kill();
                    let _ = c.wait();
                    status[rank] = Some(-9);
                }
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let failed: Vec<String> = status
        .iter()
        .enumerate()
        .filter(|(_, s)| **s != Some(0))
        .map(|(r, s)| format!("rank {r} (exit {})", s.unwrap_or(-1)))
        .collect();
    if let Some(sig) = stopped_by {
        return Err(Error::invalid(
            "launch",
            format!("stopped by signal {sig}, forwarded to every rank"),
        ));
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(Error::invalid(
            "launch",
            format!("failed: {}", failed.join(", ")),
        ))
    }
}

/// `Command::die_with_launcher`: the started process gets SIGTERM when the launcher
/// dies, however it dies (Linux: `PR_SET_PDEATHSIG`; elsewhere only the forwarding in
/// [`supervise`] applies).
trait DieWithLauncher {
    fn die_with_launcher(&mut self) -> &mut Self;
}

impl DieWithLauncher for Command {
    #[cfg(target_os = "linux")]
    fn die_with_launcher(&mut self) -> &mut Self {
        use std::os::unix::process::CommandExt;
        let launcher = std::process::id() as libc::pid_t;
        // SAFETY: the closure runs in the child between fork and exec, where only
        // async-signal-safe functions may be called: prctl, getppid and _exit are, and
        // it allocates nothing.
        unsafe {
            self.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The launcher died before the request took effect: no signal will come.
                if libc::getppid() != launcher {
                    libc::_exit(1);
                }
                Ok(())
            })
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn die_with_launcher(&mut self) -> &mut Self {
        self
    }
}

/// The launcher's stop signals: recorded by a handler, forwarded by [`supervise`].
#[cfg(unix)]
mod signals {
    use std::process::Child;
    use std::sync::atomic::{AtomicI32, Ordering};

    /// The last stop signal received and not yet forwarded (0: none).
    static PENDING: AtomicI32 = AtomicI32::new(0);

    extern "C" fn record(sig: libc::c_int) {
        PENDING.store(sig, Ordering::SeqCst);
    }

    /// From now on SIGINT, SIGTERM and SIGHUP no longer end the launcher at once.
    pub fn catch_stop_signals() {
        let handler: extern "C" fn(libc::c_int) = record;
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            // SAFETY: installs a handler that only stores into an atomic, which is
            // async-signal-safe.
            unsafe {
                libc::signal(sig, handler as libc::sighandler_t);
            }
        }
    }

    pub fn take_stop_signal() -> Option<i32> {
        match PENDING.swap(0, Ordering::SeqCst) {
            0 => None,
            sig => Some(sig),
        }
    }

    pub fn forward(child: &Child, sig: i32) {
        // SAFETY: kill(2) on our own child's pid; it has not been waited for (the
        // caller forwards only to ranks without a status), so the pid is still ours.
        unsafe {
            libc::kill(child.id() as libc::pid_t, sig);
        }
    }
}

#[cfg(not(unix))]
mod signals {
    pub fn catch_stop_signals() {}
    pub fn take_stop_signal() -> Option<i32> {
        None
    }
    pub fn forward(_: &std::process::Child, _: i32) {}
}
