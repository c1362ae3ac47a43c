//! Loader throughput: writes temporary u16 shards (like FineWeb's GPT-2 shards), then times
//! batches at a few (B, T). A training step takes milliseconds at least; a batch should cost
//! microseconds. `cargo run --release -p swax-bench --bin bench_loader -- [MILLION_TOKENS]`.

use std::time::Instant;

use swax_data::{write_shard, Loader, LoaderConfig, Rng, Shard, ShardFormat};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let millions: usize = std::env::args().nth(1).map_or(Ok(200), |s| s.parse())?;
    let dir = tempfile::tempdir()?;
    let shards = 4;
    let per_shard = millions * 1_000_000 / shards;
    let mut rng = Rng::new(0);
    let tokens: Vec<u32> = (0..per_shard).map(|_| rng.below(50257) as u32).collect();
    let paths: Vec<_> = (0..shards)
        .map(|i| dir.path().join(format!("train_{i:06}.bin")))
        .collect();
    let start = Instant::now();
    for path in &paths {
        write_shard(path, ShardFormat::U16, &tokens)?;
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "wrote {shards} shards of {per_shard} tokens in {secs:.2} s ({:.0} M tokens/s)",
        (shards * per_shard) as f64 / secs / 1e6
    );
    let open = || paths.iter().map(Shard::open).collect::<Result<Vec<_>, _>>();
    for (b, t) in [(8, 128), (8, 1024), (16, 2048), (64, 2048)] {
        let start = Instant::now();
        let mut loader = Loader::new(open()?, LoaderConfig::new(b, t, 1, 50257))?;
        let setup = start.elapsed().as_secs_f64();
        // Enough batches to read about a quarter of the data, cold pages included.
        let batches = (shards * per_shard / 4 / (b * t)).max(10);
        let start = Instant::now();
        let mut checksum = 0u64;
        for _ in 0..batches {
            let batch = loader.next_batch()?;
            checksum = checksum.wrapping_add(u64::from(batch.targets[b * t - 1]));
        }
        let secs = start.elapsed().as_secs_f64();
        println!(
            "B={b:3} T={t:5}: {batches:6} batches, {:8.1} us/batch, {:6.0} M tokens/s \
             (open + first shard layout {:.1} ms; checksum {checksum})",
            secs / batches as f64 * 1e6,
            (batches * b * t) as f64 / secs / 1e6,
            setup * 1e3
        );
    }
    Ok(())
}
