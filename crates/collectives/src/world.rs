//! Joining the world a launcher started: `brrr launch`, torchrun, srun or mpirun.

use crate::communicator::Communicator;
use crate::env::{BIND_ENV, LaunchEnv, timeout_from_env};
use crate::error::{CollError, Result};
use std::net::IpAddr;

/// The world of this process, from its environment ([`LaunchEnv`]): over MPI when built
/// with the `mpi` feature and started by mpirun, otherwise over sockets with a
/// rendezvous on `MASTER_ADDR:MASTER_PORT` (a single process needs neither). The receive
/// timeout comes from `BRRR_COLL_TIMEOUT_S`; sockets bind to `BRRR_BIND_ADDR`, loopback
/// by default.
pub fn from_env() -> Result<Communicator> {
    let env = LaunchEnv::from_env()?;
    let timeout = timeout_from_env(crate::DEFAULT_TIMEOUT)?;
    #[cfg(feature = "mpi")]
    if env.launcher == crate::env::Launcher::OpenMpi {
        let link = crate::mpi::MpiLink::init()?;
        return Ok(Communicator::new(Box::new(link), timeout));
    }
    let mut opts = crate::socket::SocketOptions {
        timeout,
        ..Default::default()
    };
    if let Ok(addr) = std::env::var(BIND_ENV) {
        opts.bind = addr.parse::<IpAddr>().map_err(|_| {
            CollError::setup(
                "socket",
                format!("{BIND_ENV}={addr:?} is not an IP address"),
            )
        })?;
    }
    let master = format!("{}:{}", env.master_addr, env.master_port);
    let link = crate::socket::connect(env.rank, env.world_size, &master, &opts)?;
    Ok(Communicator::new(Box::new(link), timeout))
}
