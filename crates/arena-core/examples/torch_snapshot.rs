//! Reads a PyTorch memory snapshot as `cuda-arena replay` does and prints what it read, with
//! the time it took; for measuring the reader:
//! `cargo run --release -p cuda-arena-core --example torch_snapshot -- snapshot.pickle [device]`
//! (`/usr/bin/time -v` around it gives the memory).
use cuda_arena_core::trace::torch_snapshot::read_snapshot_from;

fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: torch_snapshot FILE [DEVICE]")?;
    let device = match args.next() {
        None => None,
        Some(d) => Some(
            d.parse()
                .map_err(|_| format!("device must be a number, got {d:?}"))?,
        ),
    };
    let file = std::fs::File::open(&path).map_err(|e| format!("{path}: {e}"))?;
    let bytes = file.metadata().map_err(|e| format!("{path}: {e}"))?.len();
    let started = std::time::Instant::now();
    let t = read_snapshot_from(std::io::BufReader::new(file), device)
        .map_err(|e| format!("{path}: {e}"))?;
    let elapsed = started.elapsed();
    println!(
        "{path}: {} bytes read in {:.3} s ({:.1} MB/s): {} ops; {:?}",
        bytes,
        elapsed.as_secs_f64(),
        bytes as f64 / 1e6 / elapsed.as_secs_f64().max(1e-9),
        t.ops.len(),
        t.report
    );
    Ok(())
}
