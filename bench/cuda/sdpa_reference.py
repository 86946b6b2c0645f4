#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention on the shapes of bench_cuda_attention, in TFLOP/s.

The reference bench_cuda_attention sets carto's fused attention against: causal, no dropout,
(B, heads, S, d) tensors, forward and backward, bf16 at every shape and fp32 at GPT-2's. FLOPs
follow the benchmark's convention (FlashAttention's): forward 4*B*a*S^2*d halved by the causal
mask, backward 2.5 times the forward. Each figure is the mean of --reps timed calls (CUDA events)
after --warmup untimed ones; the backward is timed alone through torch.autograd.grad on a kept
graph, without its forward.

Prints one line per shape and pass and, with --out FILE, writes them as
"<pass> <B> <a> <S> <d> <dtype> <TFLOP/s>" for bench_cuda_attention --sdpa=FILE.
Without PyTorch or a CUDA device it prints one line and exits with 77 (skipped).
"""
import argparse
import sys

SHAPES = [(8, 12, 1024, 64, "bf16"), (4, 16, 2048, 64, "bf16"), (2, 16, 4096, 64, "bf16"),
          (8, 12, 1024, 64, "fp32")]


def forward_flops(b, a, s, d):
    return 4.0 * b * a * s * s * d / 2.0


def time_ms(torch, fn, warmup, reps):
    for _ in range(warmup):
        fn()
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / reps


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="file for bench_cuda_attention --sdpa")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("sdpa_reference: PyTorch is not installed; skipping")
        return 77
    if not torch.cuda.is_available():
        print("no CUDA device found; skipping")
        return 77
    # fp32 means fp32: no TF32 in the reference's matrix products.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    lines = []
    for b, a, s, d, name in SHAPES:
        dtype = torch.bfloat16 if name == "bf16" else torch.float32
        q, k, v = (torch.randn(b, a, s, d, device="cuda", dtype=dtype, requires_grad=True)
                   for _ in range(3))
        dout = torch.randn(b, a, s, d, device="cuda", dtype=dtype)
        fwd = time_ms(torch, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                      args.warmup, args.reps)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        bwd = time_ms(torch,
                      lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True),
                      args.warmup, args.reps)
        flops = forward_flops(b, a, s, d)
        for label, ms, f in (("fwd", fwd, flops), ("bwd", bwd, 2.5 * flops)):
            tflops = f / (ms * 1e-3) * 1e-12
            lines.append(f"{label} {b} {a} {s} {d} {name} {tflops:.3f}")
            print(f"sdpa {label} B={b} a={a} S={s} d={d} {name}: {ms:.3f} ms, "
                  f"{tflops:.1f} TFLOP/s")
        del q, k, v, dout, out
        torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w", encoding="ascii") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
