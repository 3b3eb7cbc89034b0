//! TCP transport: every pair of ranks shares one connection. Ranks meet through a
//! rendezvous: rank 0 listens on the master address, every other rank connects and
//! reports the port of its own data listener; rank 0 answers with the table of all
//! addresses, and the ranks connect to each other (rank `i` dials every rank below it).
//!
//! Hardening: listeners bind to loopback unless [`SocketOptions::bind`] says otherwise;
//! every length read from the network is bounded before anything is allocated (world
//! size, frame length); every read has a deadline, so a dead or stuck peer becomes an
//! error naming it, never a hang.

use crate::error::{CollError, Result};
use crate::frame::{Frame, HEADER_BYTES};
use crate::link::{Link, LinkError};
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The largest world a rendezvous accepts.
pub const MAX_WORLD: usize = 1 << 16;
const HELLO_MAGIC: [u8; 4] = *b"brrR";
const VERSION: u32 = 1;
/// How long an accepted connection may take to greet: a rank greets as soon as it has
/// connected, so one that says nothing for this long is not a rank (a port scanner, a
/// health check) and is dropped rather than stalling the rendezvous.
const GREETING_TIMEOUT: Duration = Duration::from_secs(5);

/// How a socket world is set up.
#[derive(Debug, Clone)]
pub struct SocketOptions {
    /// Address the listeners bind to: loopback by default, so nothing is reachable from
    /// another machine unless asked (`0.0.0.0` or an interface's address for multi-node).
    pub bind: IpAddr,
    /// Receive timeout of every collective.
    pub timeout: Duration,
    /// How long the rendezvous waits for every rank to appear.
    pub connect_timeout: Duration,
    /// The largest frame accepted, in elements (bounds the allocation of a receive).
    pub max_frame_elems: u64,
}

impl Default for SocketOptions {
    fn default() -> Self {
        SocketOptions {
            bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
            timeout: crate::DEFAULT_TIMEOUT,
            connect_timeout: Duration::from_secs(60),
            max_frame_elems: 1 << 28,
        }
    }
}

fn io_err(what: impl std::fmt::Display, e: std::io::Error) -> CollError {
    CollError::setup("socket", format!("{what}: {e}"))
}

/// One rank's connections to every other rank.
pub struct SocketLink {
    rank: usize,
    /// One lock per peer: threads receiving from different peers never wait on each other.
    readers: Vec<Mutex<Option<TcpStream>>>,
    writers: Vec<Option<Sender<Frame>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
    write_error: Arc<Mutex<Option<String>>>,
    max_frame_elems: u64,
}

/// Joins the world of `world` ranks as `rank`, meeting at `master` (a `host:port`).
pub fn connect(
    rank: usize,
    world: usize,
    master: &str,
    opts: &SocketOptions,
) -> Result<SocketLink> {
    if world == 0 || world > MAX_WORLD || rank >= world {
        return Err(CollError::setup(
            "socket",
            format!("rank {rank} of world {world}"),
        ));
    }
    if world == 1 {
        return SocketLink::new(0, vec![None], opts.max_frame_elems, opts.timeout);
    }
    let master_addr = master
        .to_socket_addrs()
        .map_err(|e| io_err(format!("resolving {master}"), e))?
        .next()
        .ok_or_else(|| CollError::setup("socket", format!("{master} resolves to nothing")))?;
    let deadline = Instant::now() + opts.connect_timeout;
    let data =
        TcpListener::bind((opts.bind, 0)).map_err(|e| io_err("binding the data listener", e))?;
    let my_port = data
        .local_addr()
        .map_err(|e| io_err("data listener", e))?
        .port();
    let table = if rank == 0 {
        let rv = TcpListener::bind((opts.bind, master_addr.port())).map_err(|e| {
            io_err(
                format!(
                    "binding the rendezvous on {}:{}",
                    opts.bind,
                    master_addr.port()
                ),
                e,
            )
        })?;
        serve_rendezvous(
            &rv,
            world,
            SocketAddr::new(master_addr.ip(), my_port),
            deadline,
        )?
    } else {
        join_rendezvous(master_addr, rank, world, my_port, deadline)?
    };
    let mut streams: Vec<Option<TcpStream>> = (0..world).map(|_| None).collect();
    for (peer, addr) in table.iter().enumerate().take(rank) {
        let mut s = dial(*addr, deadline)?;
        s.write_all(&hello(rank, world, 0))
            .map_err(|e| io_err(format!("greeting rank {peer}"), e))?;
        streams[peer] = Some(s);
    }
    for _ in rank + 1..world {
        let (s, peer, w, _) = accept_rank(&data, deadline)?;
        if w != world || peer <= rank || streams[peer].is_some() {
            return Err(CollError::setup(
                "socket",
                format!("unexpected greeting from rank {peer} of world {w}"),
            ));
        }
        streams[peer] = Some(s);
    }
    SocketLink::new(rank, streams, opts.max_frame_elems, opts.timeout)
}

fn hello(rank: usize, world: usize, port: u16) -> [u8; 16] {
    let mut h = [0u8; 16];
    h[0..4].copy_from_slice(&HELLO_MAGIC);
    h[4..8].copy_from_slice(&VERSION.to_le_bytes());
    h[8..11].copy_from_slice(&(rank as u32).to_le_bytes()[..3]);
    h[11..14].copy_from_slice(&(world as u32).to_le_bytes()[..3]);
    h[14..16].copy_from_slice(&port.to_le_bytes());
    h
}

fn read_hello(s: &mut TcpStream, deadline: Instant) -> Result<(usize, usize, u16)> {
    let mut h = [0u8; 16];
    read_by(s, &mut h, deadline).map_err(|e| io_err("reading a greeting", e))?;
    let u24 = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], 0]) as usize;
    if h[0..4] != HELLO_MAGIC || h[4..8] != VERSION.to_le_bytes() {
        return Err(CollError::setup(
            "socket",
            "a connection that is not a brrr rank of this version",
        ));
    }
    let (rank, world) = (u24(&h[8..11]), u24(&h[11..14]));
    if world == 0 || world > MAX_WORLD || rank >= world {
        return Err(CollError::setup(
            "socket",
            format!("greeting with rank {rank} of world {world}"),
        ));
    }
    Ok((rank, world, u16::from_le_bytes([h[14], h[15]])))
}

fn read_by(s: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> std::io::Result<()> {
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1));
    s.set_read_timeout(Some(left))?;
    s.read_exact(buf)
}

/// Rank 0: collects every rank's data address and sends back the table.
fn serve_rendezvous(
    rv: &TcpListener,
    world: usize,
    me: SocketAddr,
    deadline: Instant,
) -> Result<Vec<SocketAddr>> {
    let mut table: Vec<Option<SocketAddr>> = vec![None; world];
    table[0] = Some(me);
    let mut conns = Vec::new();
    while conns.len() + 1 < world {
        let (s, rank, w, port) = accept_rank(rv, deadline)?;
        if w != world || rank == 0 || table[rank].is_some() {
            return Err(CollError::setup(
                "socket",
                format!(
                    "rendezvous: rank {rank} of world {w} (expected a new rank of world {world})"
                ),
            ));
        }
        let ip = s
            .peer_addr()
            .map_err(|e| io_err("rendezvous peer", e))?
            .ip();
        table[rank] = Some(SocketAddr::new(ip, port));
        conns.push(s);
    }
    let table: Vec<SocketAddr> = table.into_iter().map(|a| a.expect("filled")).collect();
    let bytes: Vec<u8> = table.iter().flat_map(encode_addr).collect();
    for mut s in conns {
        s.write_all(&bytes)
            .map_err(|e| io_err("sending the rendezvous table", e))?;
    }
    Ok(table)
}

/// Ranks above 0: report our data port, read the table (its size is known: `world`).
fn join_rendezvous(
    master: SocketAddr,
    rank: usize,
    world: usize,
    port: u16,
    deadline: Instant,
) -> Result<Vec<SocketAddr>> {
    let mut s = dial(master, deadline)?;
    s.write_all(&hello(rank, world, port))
        .map_err(|e| io_err("greeting rank 0", e))?;
    let mut bytes = vec![0u8; world * 18];
    read_by(&mut s, &mut bytes, deadline)
        .map_err(|e| io_err("reading the rendezvous table from rank 0", e))?;
    Ok(bytes.chunks_exact(18).map(decode_addr).collect())
}

fn encode_addr(a: &SocketAddr) -> [u8; 18] {
    let mut b = [0u8; 18];
    let v6 = match a.ip() {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    };
    b[..16].copy_from_slice(&v6.octets());
    b[16..].copy_from_slice(&a.port().to_le_bytes());
    b
}

fn decode_addr(b: &[u8]) -> SocketAddr {
    let octets: [u8; 16] = b[..16].try_into().expect("16 bytes");
    let v6 = Ipv6Addr::from(octets);
    let ip = v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4);
    SocketAddr::new(ip, u16::from_le_bytes([b[16], b[17]]))
}

/// Connects, retrying while the listener is not up yet.
fn dial(addr: SocketAddr, deadline: Instant) -> Result<TcpStream> {
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            Ok(s) => {
                s.set_nodelay(true).map_err(|e| io_err("TCP_NODELAY", e))?;
                return Ok(s);
            }
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(io_err(format!("connecting to {addr}"), e)),
        }
    }
}

/// Accepts connections until one greets as a brrr rank; drops (and names on stderr)
/// any other, so a stray connection to the port never fails the job.
fn accept_rank(l: &TcpListener, deadline: Instant) -> Result<(TcpStream, usize, usize, u16)> {
    loop {
        let mut s = accept_until(l, deadline)?;
        let by = deadline.min(Instant::now() + GREETING_TIMEOUT);
        match read_hello(&mut s, by) {
            Ok((rank, world, port)) => return Ok((s, rank, world, port)),
            Err(e) => {
                let from = s.peer_addr().map_or("?".to_string(), |a| a.to_string());
                eprintln!("socket: dropped a connection from {from} that is not a rank: {e}");
            }
        }
    }
}

fn accept_until(l: &TcpListener, deadline: Instant) -> Result<TcpStream> {
    l.set_nonblocking(true).map_err(|e| io_err("listener", e))?;
    loop {
        match l.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false)
                    .map_err(|e| io_err("accepted socket", e))?;
                s.set_nodelay(true).map_err(|e| io_err("TCP_NODELAY", e))?;
                return Ok(s);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                return Err(CollError::setup(
                    "socket",
                    "rendezvous: not every rank connected before the deadline",
                ));
            }
            Err(e) => return Err(io_err("accepting a rank", e)),
        }
    }
}

impl SocketLink {
    fn new(
        rank: usize,
        streams: Vec<Option<TcpStream>>,
        max_frame_elems: u64,
        write_timeout: Duration,
    ) -> Result<Self> {
        let write_error = Arc::new(Mutex::new(None));
        let mut writers = Vec::new();
        let mut threads = Vec::new();
        for (peer, s) in streams.iter().enumerate() {
            let Some(s) = s else {
                writers.push(None);
                continue;
            };
            let mut w = s.try_clone().map_err(|e| io_err("cloning a socket", e))?;
            // A peer that stops reading must not block this rank's exit forever.
            w.set_write_timeout(Some(write_timeout))
                .map_err(|e| io_err("socket write timeout", e))?;
            let (tx, rx) = channel::<Frame>();
            let err = Arc::clone(&write_error);
            // One writer thread per peer: `send` only queues, as `Link` requires, so a
            // step in which every rank sends before receiving cannot fill both socket
            // buffers and deadlock.
            let t = std::thread::Builder::new()
                .name(format!("brrr-send-{peer}"))
                .spawn(move || {
                    while let Ok(f) = rx.recv() {
                        let r = w
                            .write_all(&f.encode_header())
                            .and_then(|_| w.write_all(&f.payload_bytes()));
                        if let Err(e) = r {
                            *err.lock().unwrap_or_else(|p| p.into_inner()) =
                                Some(format!("sending to rank {peer}: {e}"));
                            return;
                        }
                    }
                })
                .map_err(|e| io_err("starting a sender thread", e))?;
            threads.push(t);
            writers.push(Some(tx));
        }
        Ok(SocketLink {
            rank,
            readers: streams.into_iter().map(Mutex::new).collect(),
            writers,
            threads,
            write_error,
            max_frame_elems,
        })
    }
}

impl Link for SocketLink {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.readers.len()
    }

    fn name(&self) -> &'static str {
        "socket"
    }

    fn send(&self, to: usize, frame: Frame) -> Result<(), LinkError> {
        if let Some(e) = self
            .write_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        {
            return Err(LinkError::Lost(e));
        }
        let tx = self
            .writers
            .get(to)
            .and_then(Option::as_ref)
            .ok_or_else(|| LinkError::Lost(format!("no connection to rank {to}")))?;
        tx.send(frame)
            .map_err(|_| LinkError::Lost("its sender thread has ended".into()))
    }

    fn recv(&self, from: usize, timeout: Duration) -> Result<Frame, LinkError> {
        let max = self.max_frame_elems;
        let mut reader = self
            .readers
            .get(from)
            .ok_or_else(|| LinkError::Lost(format!("no connection to rank {from}")))?
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let s = reader
            .as_mut()
            .ok_or_else(|| LinkError::Lost(format!("no connection to rank {from}")))?;
        s.set_read_timeout(Some(timeout))
            .map_err(|e| LinkError::Lost(e.to_string()))?;
        let classify = |e: std::io::Error| match e.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => LinkError::Timeout,
            ErrorKind::UnexpectedEof => {
                LinkError::Lost("the connection was closed (the process exited?)".into())
            }
            _ => LinkError::Lost(e.to_string()),
        };
        let mut h = [0u8; HEADER_BYTES];
        s.read_exact(&mut h).map_err(classify)?;
        let (header, len) = Frame::decode_header(&h, max).map_err(LinkError::Other)?;
        let mut bytes = vec![0u8; len * 4];
        s.read_exact(&mut bytes).map_err(classify)?;
        let data = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        Ok(Frame { header, data })
    }
}

impl Drop for SocketLink {
    /// Delivers what is queued before the sockets close: a rank that finishes first must
    /// not cut off its last frames (its peers would see a closed connection).
    fn drop(&mut self) {
        self.writers.clear();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
