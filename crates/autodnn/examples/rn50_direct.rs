use autodnn::*;
fn main() {
    // (c, h, k, r, stride, pad, count)
    let layers: &[(usize, usize, usize, usize, usize, i64, usize)] = &[
        (3, 224, 64, 7, 2, 3, 1),
        (64, 56, 256, 1, 1, 0, 4),
        (64, 56, 64, 1, 1, 0, 1),
        (64, 56, 64, 3, 1, 1, 3),
        (256, 56, 64, 1, 1, 0, 2),
        (256, 56, 512, 1, 2, 0, 1),
        (256, 56, 128, 1, 2, 0, 1),
        (128, 28, 128, 3, 1, 1, 4),
        (128, 28, 512, 1, 1, 0, 4),
        (512, 28, 128, 1, 1, 0, 3),
        (512, 28, 1024, 1, 2, 0, 1),
        (512, 28, 256, 1, 2, 0, 1),
        (256, 14, 256, 3, 1, 1, 6),
        (256, 14, 1024, 1, 1, 0, 6),
        (1024, 14, 256, 1, 1, 0, 5),
        (1024, 14, 2048, 1, 2, 0, 1),
        (1024, 14, 512, 1, 2, 0, 1),
        (512, 7, 512, 3, 1, 1, 3),
        (512, 7, 2048, 1, 1, 0, 3),
        (2048, 7, 512, 1, 1, 0, 2),
    ];
    let threads: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse().unwrap())
        .unwrap_or(1);
    let h = Handle::with_threads(threads).unwrap();
    let (mut tot_ms, mut tot_fl) = (0.0, 0.0);
    for &(c, hw, k, r, s, pad, count) in layers {
        let x = TensorDesc::new(DataType::F32, Layout::Nchw, [1, c, hw, hw]).unwrap();
        let w = FilterDesc::new(DataType::F32, FilterLayout::Kcrs, [k, c, r, r]).unwrap();
        let oh = (hw as i64 + 2 * pad - r as i64) / s as i64 + 1;
        let pb = (oh - 1) * s as i64 + r as i64 - hw as i64 - pad;
        let conv = ConvDesc::new(
            Padding {
                top: pad,
                bottom: pb,
                left: pad,
                right: pb,
            },
            [s, s],
            [1, 1],
            1,
            ConvMode::CrossCorrelation,
        )
        .unwrap();
        let p = ConvProblem::forward_packed(x, w, conv, Layout::Nchw).unwrap();
        let xv = vec![1.0f32; p.x().span()];
        let wv = vec![1.0f32; p.w().elements()];
        let mut y = vec![0.0f32; p.y().span()];
        let mut ts = vec![];
        for _ in 0..7 {
            let t = std::time::Instant::now();
            h.conv_forward(&p, "direct", &xv, &wv, &mut y).unwrap();
            ts.push(t.elapsed().as_secs_f64() * 1e3);
        }
        ts.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let ms = ts[3];
        println!(
            "c{c} h{hw} k{k} r{r} s{s}: {ms:.3} ms  {:.1} GF/s",
            p.flops() / ms / 1e6
        );
        tot_ms += ms * count as f64;
        tot_fl += p.flops() * count as f64;
    }
    println!("total {tot_ms:.2} ms {:.1} GF/s", tot_fl / tot_ms / 1e6);
}
