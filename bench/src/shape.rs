//! The named shapes the kernel benchmarks (bench-attention-gpu, bench-recurrent-gpu) and their
//! PyTorch peers (bench/peers/kernel_peers.py, which names the same two) time the mixers at:
//! `paper`, where the peers were first measured (B 8, T 8192, 16 heads of 128), and
//! `swax-small`, the shape of swax-small's mixers (configs/swax-small.toml: B 16, T 4096, 12 heads
//! of 64; its mLSTM's q and k have half the head's width, Dk 32 beside Dv 64, as
//! nn/src/layers/mlstm.rs makes them). A case's line names its shape by `label`, which the peers
//! write the same way: lines of one shape are matched by it.

/// One named shape: batch, sequence, heads and the head dim `d` of attention, of the gated delta
/// rule (Dk = Dv = d) and of the mLSTM's values, whose q and k are `mlstm_dk` wide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub name: &'static str,
    pub b: usize,
    pub t: usize,
    pub h: usize,
    pub d: usize,
    pub mlstm_dk: usize,
}

pub const PAPER: Shape = Shape {
    name: "paper",
    b: 8,
    t: 8192,
    h: 16,
    d: 128,
    mlstm_dk: 128,
};

pub const SWAX_SMALL: Shape = Shape {
    name: "swax-small",
    b: 16,
    t: 4096,
    h: 12,
    d: 64,
    mlstm_dk: 32,
};

pub const SHAPES: [Shape; 2] = [PAPER, SWAX_SMALL];

impl Shape {
    /// The shape called `name` (a command-line value parser).
    pub fn by_name(name: &str) -> Result<Shape, String> {
        SHAPES.into_iter().find(|s| s.name == name).ok_or_else(|| {
            let names: Vec<_> = SHAPES.iter().map(|s| s.name).collect();
            format!("shape {name:?}: expected one of {}", names.join(", "))
        })
    }

    /// How a result line names this shape with q, k of head dim `dk` and v of `dv`:
    /// "B16 T4096 H12 D64", or "B16 T4096 H12 Dk32 Dv64" where they differ.
    pub fn label(&self, dk: usize, dv: usize) -> String {
        let heads = match dk == dv {
            true => format!("D{dk}"),
            false => format!("Dk{dk} Dv{dv}"),
        };
        format!("B{} T{} H{} {heads}", self.b, self.t, self.h)
    }
}
