"""clip_grad_norm_(foreach=True) and clip_grad_value_(foreach=True) on CUDA grads (the fused paths FSDP and
torchtitan use), with norm_type 2 and inf, against the same clipping of the same grads on the CPU
(foreach=False).

EXPECTED: clean
WORLD_SIZE: 1
REASON: torch/nn/utils/clip_grad.py: the total norm is the norm of the per-tensor norms (torch._foreach_norm when foreach), grads are scaled by clamp(max_norm / (total + 1e-6), max=1) (torch._foreach_mul_), clip_grad_value_ clamps each grad to [-clip, clip].
"""
import torch


def main():
    torch.cuda.set_device(0)
    g = torch.Generator().manual_seed(0)
    shapes = [(64, 32), (32,), (16, 64), (16,), (7, 3, 5)]
    for norm_type in (2.0, float("inf")):
        host = [torch.randn(s, generator=g) * 3 for s in shapes]
        cpu_params = [torch.zeros(s, requires_grad=True) for s in shapes]
        gpu_params = [torch.zeros(s, device="cuda", requires_grad=True) for s in shapes]
        for p, q, h in zip(cpu_params, gpu_params, host):
            p.grad = h.clone()
            q.grad = h.cuda()
        n_cpu = torch.nn.utils.clip_grad_norm_(cpu_params, 1.0, norm_type=norm_type, foreach=False)
        n_gpu = torch.nn.utils.clip_grad_norm_(gpu_params, 1.0, norm_type=norm_type, foreach=True)
        assert abs(n_cpu.item() - n_gpu.item()) <= 1e-4 * n_cpu.item(), (norm_type, n_cpu, n_gpu)
        for p, q in zip(cpu_params, gpu_params):
            assert torch.allclose(p.grad, q.grad.cpu(), rtol=1e-5, atol=1e-6), norm_type
    host = [torch.randn(s, generator=g) for s in shapes]
    gpu_params = [torch.zeros(s, device="cuda", requires_grad=True) for s in shapes]
    for q, h in zip(gpu_params, host):
        q.grad = h.cuda()
    torch.nn.utils.clip_grad_value_(gpu_params, 0.5, foreach=True)
    for q, h in zip(gpu_params, host):
        assert torch.equal(q.grad.cpu(), h.clamp(-0.5, 0.5))


if __name__ == "__main__":
    main()
