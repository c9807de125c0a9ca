//! autodnn vs the `gemm` crate vs OpenBLAS, f32, row-major C = A·B, plus the FMA peak
//! measured in the same run. See README.md.

use std::os::raw::{c_float, c_int};
use std::time::Instant;

use autodnn::cpu::Isa;
use autodnn::gemm::GemmDesc;
use autodnn::Handle;

#[link(name = "openblas")]
extern "C" {
    fn cblas_sgemm(
        order: c_int,
        transa: c_int,
        transb: c_int,
        m: c_int,
        n: c_int,
        k: c_int,
        alpha: c_float,
        a: *const c_float,
        lda: c_int,
        b: *const c_float,
        ldb: c_int,
        beta: c_float,
        c: *mut c_float,
        ldc: c_int,
    );
    fn openblas_set_num_threads(n: c_int);
}
const ROW_MAJOR: c_int = 101;
const NO_TRANS: c_int = 111;

/// Turns per entry: the libraries take turns this many times (each round starting with
/// another), so that load from other processes hits them alike and each round gives one
/// paired ratio. A turn is a pause, warm-up calls and timed calls.
const ROUNDS: usize = 15;
/// The pause before each turn.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(150);
/// The least time each turn spends on warm-up calls before timing.
const WARM_UP: std::time::Duration = std::time::Duration::from_millis(150);
/// The least time each turn spends on timed calls (and at least [`MIN_CALLS`] calls); the
/// turn's figure is the median of its calls.
const TURN: std::time::Duration = std::time::Duration::from_millis(100);
const MIN_CALLS: usize = 3;
/// Peak measurements per thread count; the best is kept.
const PEAK_TRIES: usize = 5;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn data(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..len)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// Waits (up to a minute) until the machine was at least 90% idle for half a second, so that
/// other processes' load does not land in the measurement; returns whether it was. Reads
/// Linux's /proc/stat; elsewhere it returns at once.
fn wait_for_idle() -> bool {
    fn idle_total() -> Option<(u64, u64)> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let cpu: Vec<u64> = stat
            .lines()
            .next()?
            .split_whitespace()
            .skip(1)
            .filter_map(|x| x.parse().ok())
            .collect();
        Some((
            cpu.get(3).copied()? + cpu.get(4).copied().unwrap_or(0),
            cpu.iter().sum(),
        ))
    }
    for _ in 0..120 {
        let Some((i0, t0)) = idle_total() else {
            return true;
        };
        std::thread::sleep(std::time::Duration::from_millis(500));
        let Some((i1, t1)) = idle_total() else {
            return true;
        };
        if t1 > t0 && (i1 - i0) * 10 >= (t1 - t0) * 9 {
            return true;
        }
    }
    false
}

/// Calls `f` for at least [`WARM_UP`].
fn warm_up(f: &mut dyn FnMut()) {
    let warm = Instant::now();
    while warm.elapsed() < WARM_UP {
        f();
    }
}

fn time(f: &mut dyn FnMut()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_secs_f64()
}

/// One turn of `f`: a pause, warm-up, then timed calls; the median seconds per call.
fn turn(f: &mut dyn FnMut(), calls: &mut Vec<f64>) -> f64 {
    // Idle worker threads of the library that ran before (OpenBLAS's spin for up to about
    // 0.1 s after a call, rayon's briefly) would take a core from this one.
    std::thread::sleep(SETTLE);
    // On a virtual machine an idle core comes back slowly: the first tens of milliseconds
    // after a pause ran at one core's speed. Warm up until it is back.
    warm_up(f);
    let (start, first) = (Instant::now(), calls.len());
    while calls.len() - first < MIN_CALLS || start.elapsed() < TURN {
        calls.push(time(f));
    }
    median(calls[first..].to_vec())
}

/// `runs` taking [`ROUNDS`] turns each, each round starting with another: per run, the
/// seconds of every timed call and the median of each turn (index = round).
fn take_turns(runs: &mut [&mut dyn FnMut()]) -> Vec<(Vec<f64>, Vec<f64>)> {
    let mut out = vec![(vec![], vec![]); runs.len()];
    for round in 0..ROUNDS {
        let len = runs.len();
        for i in (0..len).map(|i| (i + round) % len) {
            let (calls, turns) = &mut out[i];
            turns.push(turn(runs[i], calls));
        }
    }
    out
}

/// Median over rounds of `ours / theirs` (time ratios of turns in the same round): how many
/// times faster `ours` was, paired so that slow spells of the machine cancel.
fn paired(ours: &[f64], theirs: &[f64]) -> f64 {
    median(ours.iter().zip(theirs).map(|(o, t)| t / o).collect())
}

/// One size on `threads` threads: GFLOP/s of autodnn, gemm, OpenBLAS (medians of all timed
/// calls), autodnn's paired speed-ups over gemm and OpenBLAS, the largest relative
/// difference between the three results as a sanity check, and how unsteady the machine was
/// (see [`spread`]).
fn compare(n: usize, threads: usize, pool: &rayon::ThreadPool) -> ([f64; 3], [f64; 2], f32, f64) {
    let handle = Handle::with_threads(threads).expect("handle");
    let (a, b) = (data(n * n, 1), data(n * n, 2));
    let mut c = [vec![0f32; n * n], vec![0f32; n * n], vec![0f32; n * n]];
    let desc = GemmDesc::new(n, n, n);
    let [c0, c1, c2] = &mut c;
    let mut runs: [Box<dyn FnMut() + '_>; 3] = [
        Box::new(|| {
            handle
                .gemm(&desc, 1.0, &a, &b, 0.0, c0)
                .expect("autodnn gemm")
        }),
        Box::new(|| {
            let par = if threads > 1 {
                gemm::Parallelism::Rayon(threads)
            } else {
                gemm::Parallelism::None
            };
            pool.install(|| {
                // SAFETY: every pointer covers an n × n row-major matrix (column stride 1,
                // row stride n) that lives for the whole call.
                unsafe {
                    gemm::gemm(
                        n,
                        n,
                        n,
                        c1.as_mut_ptr(),
                        1,
                        n as isize,
                        false,
                        a.as_ptr(),
                        1,
                        n as isize,
                        b.as_ptr(),
                        1,
                        n as isize,
                        0.0f32,
                        1.0f32,
                        false,
                        false,
                        false,
                        par,
                    )
                }
            })
        }),
        Box::new(|| {
            let n = n as c_int;
            // SAFETY: row-major n × n matrices with leading dimension n, all live.
            unsafe {
                openblas_set_num_threads(threads as c_int);
                cblas_sgemm(
                    ROW_MAJOR,
                    NO_TRANS,
                    NO_TRANS,
                    n,
                    n,
                    n,
                    1.0,
                    a.as_ptr(),
                    n,
                    b.as_ptr(),
                    n,
                    0.0,
                    c2.as_mut_ptr(),
                    n,
                );
            }
        }),
    ];
    let [r0, r1, r2] = &mut runs;
    let res = take_turns(&mut [r0.as_mut(), r1.as_mut(), r2.as_mut()]);
    drop(runs);
    if std::env::var_os("GEMM_PEERS_TIMES").is_some() {
        for (name, (_, t)) in ["autodnn", "gemm", "OpenBLAS"].iter().zip(&res) {
            let ms: Vec<String> = t.iter().map(|x| format!("{:.3}", x * 1e3)).collect();
            eprintln!("{n} {threads}T {name} (turn medians): {} ms", ms.join(" "));
        }
    }
    let flops = 2.0 * (n as f64).powi(3);
    let g = [0, 1, 2].map(|i| flops / median(res[i].0.clone()) / 1e9);
    let ratios = [paired(&res[0].1, &res[1].1), paired(&res[0].1, &res[2].1)];
    let scale = c[2].iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-30);
    let diff = c[0]
        .iter()
        .zip(&c[1])
        .zip(&c[2])
        .map(|((x, y), z)| (x - y).abs().max((x - z).abs()))
        .fold(0f32, f32::max);
    let unsteady = res.iter().map(|(_, t)| spread(t)).fold(0.0, f64::max);
    (g, ratios, diff / scale, unsteady)
}

/// How far apart one library's turns were: the slowest turn median over the fastest, − 1.
/// On the development VM, spells of seconds when both cores run 10 to 30% slower (one core
/// alone does not) hit the libraries unequally; an entry whose turns spread more than
/// [`UNSTEADY`] is marked.
fn spread(turns: &[f64]) -> f64 {
    let (lo, hi) = turns
        .iter()
        .fold((f64::MAX, 0f64), |(lo, hi), &t| (lo.min(t), hi.max(t)));
    hi / lo - 1.0
}
const UNSTEADY: f64 = 0.08;

/// 1000 strided-batched 64³ products on 2 threads vs 1000 plain calls with the faster of
/// 1 and 2 threads (chosen per round): (batched GFLOP/s, plain GFLOP/s, plain's thread
/// count, paired ratio batched / plain).
fn batched(threads: usize) -> (f64, f64, usize, f64) {
    const B: usize = 1000;
    const S: usize = 64;
    let desc = GemmDesc::new(S, S, S);
    let (a, b) = (data(S * S * B, 3), data(S * S * B, 4));
    let mut c = vec![0f32; S * S * B];
    let flops = 2.0 * (S * S * S * B) as f64;
    let handles: Vec<Handle> = (1..=threads)
        .map(|t| Handle::with_threads(t).expect("handle"))
        .collect();
    let c = std::cell::RefCell::new(&mut c[..]);
    let (a, b) = (&a[..], &b[..]);
    let mut run_batched = || {
        handles[threads - 1]
            .gemm_strided_batched(
                &desc,
                1.0,
                a,
                S * S,
                b,
                S * S,
                0.0,
                &mut c.borrow_mut(),
                S * S,
                B,
            )
            .expect("batched")
    };
    let plain = |h: &Handle| {
        let mut c = c.borrow_mut();
        for i in 0..B {
            let o = i * S * S;
            h.gemm(&desc, 1.0, &a[o..], &b[o..], 0.0, &mut c[o..o + S * S])
                .expect("plain");
        }
    };
    let mut plains: Vec<Box<dyn FnMut() + '_>> = handles
        .iter()
        .map(|h| Box::new(move || plain(h)) as Box<dyn FnMut() + '_>)
        .collect();
    let mut runs: Vec<&mut dyn FnMut()> = vec![&mut run_batched];
    runs.extend(plains.iter_mut().map(|p| p.as_mut() as &mut dyn FnMut()));
    let res = take_turns(&mut runs);
    // The faster plain thread count over all calls, and per round for the paired ratio.
    let (pt, tp) = (1..=threads)
        .map(|t| (t, median(res[t].0.clone())))
        .min_by(|x, y| x.1.total_cmp(&y.1))
        .expect("at least one thread");
    let best_plain: Vec<f64> = (0..ROUNDS)
        .map(|r| (1..=threads).map(|t| res[t].1[r]).fold(f64::MAX, f64::min))
        .collect();
    let tb = median(res[0].0.clone());
    (
        flops / tb / 1e9,
        flops / tp / 1e9,
        pt,
        paired(&res[0].1, &best_plain),
    )
}

fn main() {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|s| s.parse().ok())
        .collect();
    let sizes = if sizes.is_empty() {
        vec![256, 512, 1024, 2048]
    } else {
        sizes
    };
    let isa = Isa::best_available();
    println!(
        "autodnn {} ({}), gemm 0.19 (x86-v4), OpenBLAS (cblas_sgemm); f32 row-major C = A·B",
        autodnn::VERSION,
        autodnn::gemm::kernel_name(isa)
    );
    println!(
        "GFLOP/s: median of all timed calls of {ROUNDS} turns per library, the libraries \
         taking turns; ×: autodnn's speed-up, median over the rounds of the ratio of turns in \
         one round; peak: best of {PEAK_TRIES} FMA-chain runs; each entry waits for an idle \
         machine\n"
    );
    println!(
        "| threads | size | peak | autodnn | % peak | gemm | OpenBLAS | × gemm | × OpenBLAS | max rel diff |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for threads in [1usize, 2] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("pool");
        wait_for_idle();
        let peak = (0..PEAK_TRIES)
            .map(|_| autodnn::gemm::fma_peak(isa, threads, 20_000_000).1)
            .fold(0.0, f64::max);
        for &n in &sizes {
            let idle = wait_for_idle();
            let ([ours, gemm_crate, blas], [xg, xb], diff, unsteady) = compare(n, threads, &pool);
            println!(
                "| {threads} | {n} | {peak:.1} | {ours:.1} | {:.0}% | {gemm_crate:.1} | {blas:.1} | {xg:.3} | {xb:.3} | {diff:.1e} |{}{}",
                100.0 * ours / peak,
                if idle { "" } else { " (machine busy)" },
                if unsteady > UNSTEADY {
                    format!(" (unsteady: turns up to {:.0}% apart)", 100.0 * unsteady)
                } else {
                    String::new()
                }
            );
        }
    }
    let idle = wait_for_idle();
    let (b, p, pt, ratio) = batched(2);
    println!(
        "\n1000 × 64³: strided-batched on 2 threads {b:.1} GFLOP/s; 1000 plain calls \
         (faster: {pt} thread{}) {p:.1} GFLOP/s; paired ratio {ratio:.2} (of the medians {:.2})",
        if pt == 1 { "" } else { "s" },
        b / p
    );
    if !idle {
        println!("(machine busy during the batched measurement)");
    }
}
