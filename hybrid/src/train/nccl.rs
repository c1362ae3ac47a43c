//! One process per GPU: where a rank learns its place (the launcher's environment), how the
//! ranks meet (rank 0 hands NCCL's id to the others over TCP), and the [`Collective`] they then
//! use, NCCL on its own stream (`swax_cuda::nccl`).
//!
//! The environment is the one torchrun and `swax train --gpus N` set: `RANK`, `WORLD_SIZE`,
//! `LOCAL_RANK` (the GPU on this node), `MASTER_ADDR` and `MASTER_PORT` (where rank 0 listens);
//! under Slurm's srun, `SLURM_PROCID`, `SLURM_NTASKS` and `SLURM_LOCALID` stand in for the first
//! three. Rank 0 listens at MASTER_PORT, or at the port after it under torchrun, whose agent
//! holds MASTER_PORT (`SWAX_RENDEZVOUS_PORT` sets it). Across nodes, NCCL's own bootstrap takes
//! over once the id is handed out.
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use swax_cuda::nccl::{Comm, Launched, UniqueId};
use swax_tensor::cuda::CudaStorage;
use swax_tensor::{Device, Tensor};

use super::distributed::Collective;
use super::Result;

/// How long a rank waits for the others: to meet, and in any one collective. A rank's
/// validation and checkpoint run while the others wait, so it is generous; `SWAX_NCCL_TIMEOUT`
/// (seconds) changes it.
pub const TIMEOUT: Duration = Duration::from_secs(600);

/// This process's place in a run of several.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub rank: usize,
    pub world: usize,
    /// The GPU on this node.
    pub local_rank: usize,
    /// Where rank 0 listens for the others.
    pub master: String,
    pub timeout: Duration,
}

impl Place {
    /// The place `env` describes (`std::env::var` in the program); None when it names no run of
    /// several (no `WORLD_SIZE` nor `SLURM_NTASKS`, or one of 1).
    pub fn from_env(env: impl Fn(&str) -> Option<String>) -> Result<Option<Place>> {
        let first =
            |names: [&'static str; 2]| names.into_iter().find_map(|n| env(n).map(|v| (n, v)));
        let number = |names: [&'static str; 2]| -> Result<Option<usize>> {
            match first(names) {
                None => Ok(None),
                Some((name, v)) => v
                    .trim()
                    .parse()
                    .map(Some)
                    .map_err(|_| format!("{name}={v:?} is not a number").into()),
            }
        };
        let Some(world) = number(["WORLD_SIZE", "SLURM_NTASKS"])? else {
            return Ok(None);
        };
        if world <= 1 {
            return Ok(None);
        }
        let rank = number(["RANK", "SLURM_PROCID"])?.ok_or(format!(
            "WORLD_SIZE is {world} but RANK (or SLURM_PROCID) is not set"
        ))?;
        if rank >= world {
            return Err(format!("RANK {rank} is not below WORLD_SIZE {world}").into());
        }
        let local_rank = number(["LOCAL_RANK", "SLURM_LOCALID"])?.unwrap_or(rank);
        let addr = env("MASTER_ADDR").ok_or(
            "a run of several ranks needs MASTER_ADDR (rank 0's host) and MASTER_PORT; under \
             Slurm set them from the first node of the job, e.g. MASTER_ADDR=$(scontrol show \
             hostnames $SLURM_JOB_NODELIST | head -n1)",
        )?;
        let port = env("MASTER_PORT").ok_or("a run of several ranks needs MASTER_PORT")?;
        let port: u16 = port
            .trim()
            .parse()
            .map_err(|_| format!("MASTER_PORT={port:?} is not a port"))?;
        // torchrun's agent holds MASTER_PORT itself (its store): rank 0 listens on the next.
        let port = match (
            env("SWAX_RENDEZVOUS_PORT"),
            env("TORCHELASTIC_USE_AGENT_STORE"),
        ) {
            (Some(p), _) => p
                .trim()
                .parse()
                .map_err(|_| format!("SWAX_RENDEZVOUS_PORT={p:?} is not a port"))?,
            (None, Some(_)) => port
                .checked_add(1)
                .ok_or("MASTER_PORT 65535 leaves no port after it for the rendezvous")?,
            (None, None) => port,
        };
        let timeout = match env("SWAX_NCCL_TIMEOUT") {
            None => TIMEOUT,
            Some(s) => Duration::from_secs(
                s.trim()
                    .parse()
                    .map_err(|_| format!("SWAX_NCCL_TIMEOUT={s:?} is not a number of seconds"))?,
            ),
        };
        Ok(Some(Place {
            rank,
            world,
            local_rank,
            master: format!("{addr}:{port}"),
            timeout,
        }))
    }

    pub fn device(&self) -> Device {
        Device::Cuda(self.local_rank)
    }
}

/// What rank 0 sends each rank: this tag, the world size (to catch ranks of two runs meeting)
/// and the id.
const TAG: &[u8; 8] = b"swax-id1";

/// Hands `id` (rank 0's) to every other rank, or receives it (`id` None), at `place.master`.
pub fn rendezvous(place: &Place, id: Option<UniqueId>) -> Result<UniqueId> {
    let deadline = Instant::now() + place.timeout;
    let what = |e: std::io::Error| format!("rendezvous at {}: {e}", place.master);
    if let Some(id) = id {
        let bind: SocketAddr = match place.master.to_socket_addrs().map_err(what)?.next() {
            Some(a) => SocketAddr::new([0, 0, 0, 0].into(), a.port()),
            None => return Err(format!("{}: no such address", place.master).into()),
        };
        let listener = TcpListener::bind(bind).map_err(what)?;
        listener.set_nonblocking(true).map_err(what)?;
        let mut served = 0;
        while served + 1 < place.world {
            match listener.accept() {
                Ok((mut s, _)) => {
                    s.set_nonblocking(false).map_err(what)?;
                    s.write_all(TAG).map_err(what)?;
                    s.write_all(&(place.world as u64).to_le_bytes())
                        .map_err(what)?;
                    s.write_all(&id.0).map_err(what)?;
                    served += 1;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        return Err(format!(
                            "rank 0: {served} of {} ranks reached {} within {} s",
                            place.world - 1,
                            place.master,
                            place.timeout.as_secs()
                        )
                        .into());
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(what(e).into()),
            }
        }
        return Ok(id);
    }
    let mut s = loop {
        match TcpStream::connect(&place.master) {
            Ok(s) => break s,
            Err(e) if Instant::now() > deadline => {
                return Err(format!(
                    "rank {}: rank 0 was not listening at {} within {} s ({e})",
                    place.rank,
                    place.master,
                    place.timeout.as_secs()
                )
                .into())
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    s.set_read_timeout(Some(place.timeout)).map_err(what)?;
    let mut buf = [0u8; 8 + 8 + 128];
    s.read_exact(&mut buf).map_err(what)?;
    let world = u64::from_le_bytes(buf[8..16].try_into().expect("8 bytes"));
    if &buf[..8] != TAG || world != place.world as u64 {
        return Err(format!(
            "rank {}: {} answered for a run of {world} ranks, not {} (another run's rank 0?)",
            place.rank, place.master, place.world
        )
        .into());
    }
    Ok(UniqueId(buf[16..].try_into().expect("128 bytes")))
}

/// The ranks through NCCL, one GPU each.
pub struct NcclGroup {
    comm: Comm,
    /// Buckets summing, with their inputs (kept alive until done) and shapes.
    pending: Vec<(Vec<Tensor>, Launched)>,
    exposed_s: f64,
}

impl NcclGroup {
    /// Joins the group: rank 0 creates the id and hands it out (`rendezvous`).
    pub fn join(place: &Place) -> Result<NcclGroup> {
        let id = match place.rank {
            0 => Some(UniqueId::new()?),
            _ => None,
        };
        let id = rendezvous(place, id)?;
        NcclGroup::new(place.device(), place.rank, place.world, &id, place.timeout)
    }

    /// Joins the group `id` names as `rank` of `world` on `device` (threads of one process may
    /// each be a rank, on their own GPU).
    pub fn new(
        device: Device,
        rank: usize,
        world: usize,
        id: &UniqueId,
        timeout: Duration,
    ) -> Result<NcclGroup> {
        let Device::Cuda(ordinal) = device else {
            return Err("NCCL needs a GPU: data-parallel runs on the CPU are not supported".into());
        };
        let dev = swax_tensor::cuda::device(ordinal)?;
        Ok(NcclGroup {
            comm: Comm::new(&dev, rank, world, id, timeout)?,
            pending: Vec::new(),
            exposed_s: 0.0,
        })
    }

    /// Queues `op` on the tensors' buffers.
    fn launch(
        &self,
        tensors: &[Tensor],
        op: impl Fn(&Comm, &[&swax_cuda::Buffer]) -> std::result::Result<Launched, swax_cuda::CudaError>,
    ) -> Result<Launched> {
        let bufs = tensors
            .iter()
            .map(|t| {
                t.storage()
                    .as_cuda()
                    .map(CudaStorage::buffer)
                    .ok_or("NCCL sums GPU tensors only")
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(op(&self.comm, &bufs)?)
    }

    fn tensors(shapes: &[Tensor], launched: Launched) -> Result<Vec<Tensor>> {
        shapes
            .iter()
            .zip(launched.out)
            .map(|(t, b)| {
                Ok(Tensor::from_storage(
                    CudaStorage::from(b),
                    t.shape().clone(),
                )?)
            })
            .collect()
    }
}

impl Collective for NcclGroup {
    fn rank(&self) -> usize {
        self.comm.rank()
    }
    fn world(&self) -> usize {
        self.comm.world()
    }
    fn start_sum(&mut self, bucket: Vec<Tensor>) -> Result<()> {
        let launched = self.launch(&bucket, Comm::all_reduce_sum)?;
        self.pending.push((bucket, launched));
        Ok(())
    }
    fn finish_sums(&mut self) -> Result<Vec<Vec<Tensor>>> {
        let pending = std::mem::take(&mut self.pending);
        let launched: Vec<&Launched> = pending.iter().map(|(_, l)| l).collect();
        self.exposed_s += self.comm.wait_all(&launched)?;
        pending
            .into_iter()
            .map(|(inputs, l)| NcclGroup::tensors(&inputs, l))
            .collect()
    }
    fn broadcast(&mut self, tensors: Vec<Tensor>) -> Result<Vec<Tensor>> {
        let launched = self.launch(&tensors, Comm::broadcast)?;
        self.comm.wait_all(&[&launched])?;
        NcclGroup::tensors(&tensors, launched)
    }
    fn sum_host(&mut self, values: &[f64]) -> Result<Vec<f64>> {
        Ok(self.comm.sum_host(values)?)
    }
    fn fail(&mut self, why: &str) {
        self.comm.abort(why.to_string());
    }
    fn exposed_s(&self) -> Option<f64> {
        Some(self.exposed_s)
    }
}
