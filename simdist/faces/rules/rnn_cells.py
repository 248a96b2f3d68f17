"""Op rules for the fused LSTM and GRU cells a GPU runs for `nn.LSTM`, `nn.GRU`, `nn.LSTMCell`, `nn.GRUCell` on
CUDA tensors (without cuDNN), which have CUDA kernels only: a CPU build raised NotImplementedError for every
recurrent layer on a simulated device.

ATen's recurrent layers (aten/src/ATen/native/RNN.cpp, LSTMCell / GRUCell) compute the two gate matmuls with
`linear` and, for CUDA tensors, hand the gates, the biases and the state to one fused kernel
(aten/src/ATen/native/cuda/RNN.cu: lstm_cell_forward / gru_cell_forward and their backwards, registered in
derivatives.yaml as the cells' gradients). Each rule here is that one kernel on the current stream, with the
kernel's arithmetic in its order (gates summed input + hidden + input bias + hidden bias, in the accumulation type:
float32 for half and bfloat16) and its workspace layout (LSTM: the four activated gates; GRU: reset, input and new
gates, hx, and the hidden new-gate pre-activation with its bias), so its backward reads what its forward wrote;
bias gradients are the sums of the gate gradients as stored (a second reduction, as the kernels' callers do). Rounding differs
from eager CPU's cell (which adds the biases inside `linear`) as any two kernels' do.

simdist models no cuDNN (torch.backends.cudnn reports it absent), so the recurrent layers take this path, the one a
GPU takes with cuDNN disabled.
"""
from __future__ import annotations

import torch

from ...engine.launch import launch
from ..dispatch import _nbytes, _usable, _unwrap, allocate
from ..op_info import op_info
from ..op_rules import register

aten = torch.ops.aten


def _acc(dtype):
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _kernel(me, func, args, kwargs, shapes, compute):
    """Allocate contiguous outputs of `shapes` (None: an undefined tensor), launch one kernel on the current
    stream that fills them with compute(host arguments), and return them."""
    info = op_info(func)
    unwrapped = _unwrap(me, tuple(args), kwargs, False)
    _usable(unwrapped.sims)
    dev = unwrapped.dev
    stream = me.current_stream(dev.index)
    dtype = unwrapped.sims[0].dtype
    outs = []
    for shape in shapes:
        if shape is None:
            outs.append(None)
            continue
        stride = tuple(torch.empty(shape, device="meta").stride())
        outs.append(allocate(dev, stream, tuple(shape), stride, dtype))
    written = [o for o in outs if o is not None]
    host = unwrapped.args

    def fn():
        for o, r in zip(outs, compute(*host)):
            if o is not None:
                o._inner.copy_(r)

    launch(me, stream, info.name, "kernel", fn, unwrapped.sims, written,
           _nbytes(unwrapped.sims) + sum(o._alloc.nbytes for o in written), skip=4)
    return tuple(outs)


def _gates(x, n, acc):
    return [c.to(acc) for c in x.chunk(n, 1)]


def _bias(b, n, acc):
    return [c.to(acc) for c in b.chunk(n, 0)] if b is not None else [0] * n


@register(aten._thnn_fused_lstm_cell.default)
def _lstm_cell(me, func, args, kwargs):
    """(hy, cy, workspace) from input_gates, hidden_gates (B, 4H), cx (B, H) and the optional biases (4H)."""
    a = dict(zip([x.name for x in func._schema.arguments], args), **kwargs)
    b, h4 = a["input_gates"].shape
    h = h4 // 4

    def compute(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
        acc = _acc(input_gates.dtype)
        ii, hh = _gates(input_gates, 4, acc), _gates(hidden_gates, 4, acc)
        b1, b2 = _bias(input_bias, 4, acc), _bias(hidden_bias, 4, acc)
        pre = [ii[k] + hh[k] + b1[k] + b2[k] for k in range(4)]
        ig, fg, cg, og = torch.sigmoid(pre[0]), torch.sigmoid(pre[1]), torch.tanh(pre[2]), torch.sigmoid(pre[3])
        cy = fg * cx.to(acc) + ig * cg
        hy = og * torch.tanh(cy)
        return hy, cy, torch.cat([ig, fg, cg, og], 1)
    return _kernel(me, func, args, kwargs, [(b, h), (b, h), (b, h4)], compute)


@register(aten._thnn_fused_lstm_cell_backward_impl.default)
def _lstm_cell_backward(me, func, args, kwargs):
    """(grad_gates (B, 4H), grad_cx (B, H), grad_bias (4H) or undefined) from grad_hy, grad_cy (either may be
    undefined: zero), cx, cy and the forward's workspace."""
    a = dict(zip([x.name for x in func._schema.arguments], args), **kwargs)
    b, h = a["cx"].shape
    if a["grad_hy"] is None and a["grad_cy"] is None:
        return None, None, None  # RNN.cu _thnn_fused_lstm_cell_backward_impl_cuda: all undefined, no kernel

    def compute(grad_hy, grad_cy, cx, cy, workspace, has_bias):
        acc = _acc(cx.dtype)
        ig, fg, cg, og = _gates(workspace, 4, acc)
        ghy = grad_hy.to(acc) if grad_hy is not None else torch.zeros_like(ig)
        gcy = grad_cy.to(acc) if grad_cy is not None else torch.zeros_like(ig)
        tcy = torch.tanh(cy.to(acc))
        gog = ghy * tcy * (1 - og) * og
        gcx = (1 - tcy * tcy) * ghy * og + gcy
        gig = gcx * cg * (1 - ig) * ig
        gfg = gcx * cx.to(acc) * (1 - fg) * fg
        gcg = gcx * ig * (1 - cg * cg)
        grad_gates = torch.cat([gig, gfg, gcg, gog], 1).to(cx.dtype)
        return grad_gates, gcx * fg, grad_gates.sum(0) if has_bias else None
    return _kernel(me, func, args, kwargs, [(b, 4 * h), (b, h), (4 * h,) if a["has_bias"] else None], compute)


@register(aten._thnn_fused_gru_cell.default)
def _gru_cell(me, func, args, kwargs):
    """(hy, workspace (B, 5H): r, z, n, hx, hn + b_hn) from input_gates, hidden_gates (B, 3H), hx (B, H) and the optional biases (3H)."""
    a = dict(zip([x.name for x in func._schema.arguments], args), **kwargs)
    b, h = a["hx"].shape

    def compute(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
        acc = _acc(input_gates.dtype)
        ir, ii, inn = _gates(input_gates, 3, acc)
        hr, hi, hn = _gates(hidden_gates, 3, acc)
        b1, b2 = _bias(input_bias, 3, acc), _bias(hidden_bias, 3, acc)
        rg = torch.sigmoid(ir + hr + b1[0] + b2[0])
        ig = torch.sigmoid(ii + hi + b1[1] + b2[1])
        hn = hn + b2[2]
        ng = torch.tanh(inn + b1[2] + rg * hn)
        hx = hx.to(acc)
        hy = ng + ig * (hx - ng)
        return hy, torch.cat([rg, ig, ng, hx, hn], 1)
    return _kernel(me, func, args, kwargs, [(b, h), (b, 5 * h)], compute)


@register(aten._thnn_fused_gru_cell_backward.default)
def _gru_cell_backward(me, func, args, kwargs):
    """(grad_input_gates, grad_hidden_gates (B, 3H), grad_hx (B, H), grad_input_bias, grad_hidden_bias (3H) or
    undefined) from grad_hy and the forward's workspace."""
    a = dict(zip([x.name for x in func._schema.arguments], args), **kwargs)
    b, h = a["grad_hy"].shape

    def compute(grad_hy, workspace, has_bias):
        acc = _acc(grad_hy.dtype)
        rg, ig, ng, hx, hn = _gates(workspace, 5, acc)
        g = grad_hy.to(acc)
        gig = g * (hx - ng) * (1 - ig) * ig
        ghx = g * ig
        gin = g * (1 - ig) * (1 - ng * ng)
        ghn = gin * rg
        grg = gin * hn * (1 - rg) * rg
        gi, gh = torch.cat([grg, gig, gin], 1).to(grad_hy.dtype), torch.cat([grg, gig, ghn], 1).to(grad_hy.dtype)
        return gi, gh, ghx, gi.sum(0) if has_bias else None, gh.sum(0) if has_bias else None
    bias = (3 * h,) if a["has_bias"] else None
    return _kernel(me, func, args, kwargs, [(b, 3 * h), (b, 3 * h), (b, h), bias, bias], compute)
