//! Who am I: rank, world size and rendezvous address from the environment of whichever
//! launcher started this process — `brrr launch` and torchrun (`RANK`, `WORLD_SIZE`,
//! `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`), OpenMPI's `mpirun`
//! (`OMPI_COMM_WORLD_*`) or Slurm's `srun` (`SLURM_PROCID`, `SLURM_NTASKS`, ...).

use crate::error::{CollError, Result};
use std::time::Duration;

/// torchrun's default rendezvous port.
pub const DEFAULT_MASTER_PORT: u16 = 29500;
/// The environment variable that sets the collectives' receive timeout, in seconds.
pub const TIMEOUT_ENV: &str = "BRRR_COLL_TIMEOUT_S";
/// The environment variable naming the address sockets bind to (default loopback).
pub const BIND_ENV: &str = "BRRR_BIND_ADDR";

/// Which launcher's variables were found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    /// `brrr launch` or torchrun.
    Torchrun,
    /// OpenMPI's mpirun.
    OpenMpi,
    /// Slurm's srun.
    Slurm,
    /// None: a single process.
    Single,
}

/// A process's place in a launched job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchEnv {
    /// Global rank.
    pub rank: usize,
    /// Number of ranks.
    pub world_size: usize,
    /// Rank on this machine.
    pub local_rank: usize,
    /// Ranks on this machine.
    pub local_world_size: usize,
    /// Where rank 0 listens for the rendezvous.
    pub master_addr: String,
    /// Its port.
    pub master_port: u16,
    /// Where the values came from.
    pub launcher: Launcher,
}

fn num(get: &dyn Fn(&str) -> Option<String>, var: &str) -> Result<Option<usize>> {
    match get(var) {
        None => Ok(None),
        Some(v) => v.trim().parse().map(Some).map_err(|_| {
            CollError::setup("launch environment", format!("{var}={v:?} is not a number"))
        }),
    }
}

/// The leading integer of Slurm's `SLURM_TASKS_PER_NODE` (`"4(x2),3"` → 4).
fn leading_int(s: &str) -> Option<usize> {
    let digits: String = s.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

impl LaunchEnv {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(&|k| std::env::var(k).ok())
    }

    /// Reads variables through `get` (tests pass a map).
    pub fn from_lookup(get: &dyn Fn(&str) -> Option<String>) -> Result<Self> {
        let (launcher, rank, world, local_rank, local_world) = if let (Some(r), Some(w)) =
            (num(get, "RANK")?, num(get, "WORLD_SIZE")?)
        {
            let lr = num(get, "LOCAL_RANK")?.unwrap_or(r);
            let lw = num(get, "LOCAL_WORLD_SIZE")?.unwrap_or(w);
            (Launcher::Torchrun, r, w, lr, lw)
        } else if let (Some(r), Some(w)) = (
            num(get, "OMPI_COMM_WORLD_RANK")?,
            num(get, "OMPI_COMM_WORLD_SIZE")?,
        ) {
            let lr = num(get, "OMPI_COMM_WORLD_LOCAL_RANK")?.unwrap_or(r);
            let lw = num(get, "OMPI_COMM_WORLD_LOCAL_SIZE")?.unwrap_or(w);
            (Launcher::OpenMpi, r, w, lr, lw)
        } else if let (Some(r), Some(w)) = (num(get, "SLURM_PROCID")?, num(get, "SLURM_NTASKS")?) {
            let lr = num(get, "SLURM_LOCALID")?.unwrap_or(0);
            let lw = num(get, "SLURM_NTASKS_PER_NODE")?
                .or_else(|| get("SLURM_TASKS_PER_NODE").and_then(|s| leading_int(&s)))
                .unwrap_or(1);
            (Launcher::Slurm, r, w, lr, lw)
        } else {
            (Launcher::Single, 0, 1, 0, 1)
        };
        if world == 0 || rank >= world || local_world == 0 || local_rank >= local_world {
            return Err(CollError::setup(
                "launch environment",
                format!(
                    "rank {rank} of {world} (local {local_rank} of {local_world}) is out of range"
                ),
            ));
        }
        let master_addr = get("MASTER_ADDR")
            .or_else(|| {
                (launcher == Launcher::Slurm)
                    .then(|| get("SLURM_LAUNCH_NODE_IPADDR"))
                    .flatten()
            })
            .unwrap_or_else(|| "127.0.0.1".into());
        let master_port = match get("MASTER_PORT") {
            None => DEFAULT_MASTER_PORT,
            Some(p) => p.trim().parse().map_err(|_| {
                CollError::setup(
                    "launch environment",
                    format!("MASTER_PORT={p:?} is not a port"),
                )
            })?,
        };
        Ok(LaunchEnv {
            rank,
            world_size: world,
            local_rank,
            local_world_size: local_world,
            master_addr,
            master_port,
            launcher,
        })
    }
}

/// The receive timeout from [`TIMEOUT_ENV`], else `default`.
pub fn timeout_from_env(default: Duration) -> Result<Duration> {
    match std::env::var(TIMEOUT_ENV) {
        Err(_) => Ok(default),
        Ok(v) => match v.trim().parse::<f64>() {
            Ok(s) if s.is_finite() && s > 0.0 && s < 1e7 => Ok(Duration::from_secs_f64(s)),
            _ => Err(CollError::setup(
                "launch environment",
                format!("{TIMEOUT_ENV}={v:?} is not a positive number of seconds"),
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> Result<LaunchEnv> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        LaunchEnv::from_lookup(&move |k| m.get(k).cloned())
    }

    #[test]
    fn torchrun_openmpi_and_slurm_are_read_alike() {
        let t = env(&[
            ("RANK", "3"),
            ("WORLD_SIZE", "4"),
            ("LOCAL_RANK", "1"),
            ("LOCAL_WORLD_SIZE", "2"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "1234"),
        ])
        .unwrap();
        assert_eq!(
            (
                t.launcher,
                t.rank,
                t.world_size,
                t.local_rank,
                t.local_world_size
            ),
            (Launcher::Torchrun, 3, 4, 1, 2)
        );
        assert_eq!((t.master_addr.as_str(), t.master_port), ("10.0.0.1", 1234));
        let o = env(&[
            ("OMPI_COMM_WORLD_RANK", "2"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "2"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
        ])
        .unwrap();
        assert_eq!(
            (o.launcher, o.rank, o.world_size, o.master_port),
            (Launcher::OpenMpi, 2, 4, DEFAULT_MASTER_PORT)
        );
        let s = env(&[
            ("SLURM_PROCID", "5"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_TASKS_PER_NODE", "4(x2)"),
            ("SLURM_LAUNCH_NODE_IPADDR", "10.1.2.3"),
        ])
        .unwrap();
        assert_eq!(
            (s.launcher, s.rank, s.local_rank, s.local_world_size),
            (Launcher::Slurm, 5, 1, 4)
        );
        assert_eq!(s.master_addr, "10.1.2.3");
        assert_eq!(env(&[]).unwrap().launcher, Launcher::Single);
    }

    #[test]
    fn bad_values_are_errors_that_name_the_variable() {
        let e = env(&[("RANK", "4"), ("WORLD_SIZE", "4")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("out of range"), "{e}");
        let e = env(&[("RANK", "x"), ("WORLD_SIZE", "4")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("RANK"), "{e}");
        let e = env(&[("MASTER_PORT", "99999")]).unwrap_err().to_string();
        assert!(e.contains("MASTER_PORT"), "{e}");
    }
}
