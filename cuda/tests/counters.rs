//! The counters of launches, cuBLAS calls and host waits count what they say: kernel launches,
//! a GEMM, the syncs of a device-to-host copy and a synchronize, and a deferred read that waits
//! on its event without draining the stream. Its own test binary with one test, so that nothing
//! else counts meanwhile and the differences are exact.

mod common;

use common::Rng;
use swax_cuda::counters::{self, Counts};
use swax_cuda::kernels::optim::{adamw, global_norm, AdamWBuffers, AdamWStep};
use swax_cuda::{DType, Readback};

#[test]
#[ignore = "needs a CUDA GPU (cargo test -- --include-ignored)"]
fn counters_count_launches_blas_calls_and_waits() {
    let dev = gpu!();
    let mut rng = Rng::new(3);
    let n = 5000;
    let up = |v: Vec<f32>| dev.htod(&v).unwrap();
    let (mut p, g, mut m, mut v) = (
        up(rng.vec(n, -1.0, 1.0)),
        up(rng.vec(n, -1.0, 1.0)),
        up(vec![0.0; n]),
        up(vec![0.0; n]),
    );
    let mut norm = dev.alloc(DType::F32, 1).unwrap();
    let hp = AdamWStep {
        lr: 1e-3,
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-8,
        weight_decay: 0.1,
        step: 1,
    };
    // Compile and load the module first: loading does not launch, but keep it out anyway.
    global_norm(&dev, &[&g], &mut norm).unwrap();
    dev.synchronize().unwrap();

    let before = counters::counts();
    global_norm(&dev, &[&g, &g], &mut norm).unwrap();
    let mut params = [AdamWBuffers {
        param: &mut p,
        grad: &g,
        m: &mut m,
        v: &mut v,
        decay: true,
    }];
    adamw(&dev, hp, &mut params, Some((&norm, 1.0))).unwrap();
    let queued = counters::counts().since(&before);
    assert_eq!(
        queued,
        Counts {
            launches: 3,
            uploads: 2,
            upload_bytes: 3 * 56,
            ..Counts::default()
        },
        "the global norm is two launches and AdamW over every tensor one, each uploading its \
         table (56 bytes a tensor), none waits"
    );

    let before = counters::counts();
    let c = common::ones_gemm(&dev);
    let mut read = Readback::new(&dev, 64).unwrap();
    read.start(&[&norm, &c]).unwrap();
    let values = read.finish().unwrap();
    assert_eq!(values[1], vec![8.0; 8]);
    assert_eq!(
        counters::counts().since(&before),
        Counts {
            blas_calls: 1,
            event_waits: 1,
            uploads: 2,
            upload_bytes: (4 * 8 + 8 * 2) * 4,
            ..Counts::default()
        },
        "two uploads, a GEMM is one cuBLAS call, a deferred read one event wait and no sync"
    );
    let norm_now = dev.dtoh::<f32>(&norm).unwrap()[0] as f64;
    assert_eq!(values[0], vec![norm_now]);
    dev.synchronize().unwrap();
    let waited = counters::counts().since(&before);
    assert_eq!(waited.syncs, 2, "a dtoh and a synchronize: {waited:?}");

    counters::reset();
    assert_eq!(counters::counts(), Counts::default());
}
