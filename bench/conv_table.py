"""Table for bench/conv-peers.sh: per-layer medians over rounds, weighted totals, ratios."""
import json, statistics as st, sys
out, R = sys.argv[1], int(sys.argv[2])
ld = lambda f: [json.loads(l) for l in open(f) if l.strip()]
ort = [ld(f'{out}/ort_{i}.jsonl') for i in range(1, R+1)]
ncnn = [ld(f'{out}/ncnn_{i}.jsonl') for i in range(1, R+1)]
prep = [ld(f'{out}/prep_{i}.jsonl') for i in range(1, R+1)]
plain = [ld(f'{out}/plain_{i}.jsonl') for i in range(1, R+1)]
algos = ["depthwise","winograd_4x4","winograd_6x6","winograd_2x2","fft_tiling","fft","implicit_gemm","gemm","direct"]
short = {"winograd_4x4":"wg4","winograd_6x6":"wg6","winograd_2x2":"wg2","fft_tiling":"fftT","fft":"fft","implicit_gemm":"igemm","gemm":"gemm","direct":"direct"}
def algo_ms(runs, j, a):
    v = []
    for r in runs:
        for res in r[j]['results']:
            if res['algo'] == a and res.get('status') == 'ok':
                v.append(res['ms'])
    return st.median(v) if v else None
n = len([x for x in prep[0] if 'results' in x])
hdr = f"{'layer':17s} {'n':>2s} " + " ".join(f"{short[a]:>6s}" for a in algos[1:]) + f" | {'bestP':>6s} {'bestPl':>6s} {'ort':>6s} {'ncnn':>6s} {'P/ort':>5s} {'Pl/ort':>6s} {'P/min':>5s}"
print(hdr)
tot = dict(P=0, Pl=0, o=0, nc=0, mn=0, fl=0); t3 = dict(P=0, nc=0, o=0); tn3 = dict(P=0, Pl=0, o=0)
for j in range(n):
    name = ort[0][j]['name'].split(':')[1]; cnt = prep[0][j]['count']; fl = prep[0][j]['flops']
    cols = []; bp = bpl = 1e9
    for a in algos[1:]:
        p = algo_ms(prep, j, a); pl = algo_ms(plain, j, a)
        cols.append(f"{p:6.2f}" if p else f"{'-':>6s}")
        if p: bp = min(bp, p)
        if pl: bpl = min(bpl, pl)
    o = st.median(r[j]['ms_median'] for r in ort); nc = st.median(r[j]['ms_median'] for r in ncnn)
    print(f"{name[:17]:17s} {cnt:2d} " + " ".join(cols) + f" | {bp:6.2f} {bpl:6.2f} {o:6.2f} {nc:6.2f} {bp/o:5.2f} {bpl/o:6.2f} {bp/min(o,nc):5.2f}")
    tot['P'] += bp*cnt; tot['Pl'] += bpl*cnt; tot['o'] += o*cnt; tot['nc'] += nc*cnt; tot['mn'] += min(o,nc)*cnt; tot['fl'] += fl*cnt
    if 'kh3' in prep[0][j]['problem']:
        t3['P'] += bp*cnt; t3['nc'] += nc*cnt; t3['o'] += o*cnt
    else:
        tn3['P'] += bp*cnt; tn3['Pl'] += bpl*cnt; tn3['o'] += o*cnt
print(f"TOTAL weighted: autodnn prepared {tot['P']:.2f} ms, plain {tot['Pl']:.2f}, ort {tot['o']:.2f}, ncnn {tot['nc']:.2f}, per-layer min(ort,ncnn) {tot['mn']:.2f}")
print(f"  prepared/ort {tot['P']/tot['o']:.3f}  plain/ort {tot['Pl']/tot['o']:.3f}  prepared/min {tot['P']/tot['mn']:.3f}  GF/s prepared {tot['fl']/tot['P']/1e6:.1f}")
print(f"3x3 layers: prepared {t3['P']:.2f} ms, ncnn {t3['nc']:.2f}, ort {t3['o']:.2f} (prep/ncnn {t3['P']/t3['nc']:.3f})")
print(f"non-3x3 layers: prepared {tn3['P']:.2f}, plain {tn3['Pl']:.2f}, ort {tn3['o']:.2f}")
print("peer totals per round: ort", [r[-1]['ms_weighted'] for r in ort], "ncnn", [r[-1]['ms_weighted'] for r in ncnn])
