"""Where an op was launched: cheap stack capture on the hot path, user frames resolved only for reports."""
from __future__ import annotations

import importlib.util
import linecache
import os
import sys
import threading


def capture_frames(depth=24, skip=2, frame=None):
    """Cheap stack capture: (code, instruction offset) pairs; line numbers are resolved only when reported
    (f_lineno scans the code's line table on every access, f_lasti does not). `skip` frames above this one
    are simdist's own (callers on the hot path know their depth; the report filters any that remain).
    frame: start there instead."""
    if frame is not None:
        f = frame
    else:
        try:
            f = sys._getframe(skip)
        except ValueError:
            f = sys._getframe(1)
    out = []  # flat: code, offset, code, offset... (one object per op: the run keeps every op's frames)
    add = out.append
    while f is not None and depth:
        add(f.f_code)
        add(f.f_lasti)
        f = f.f_back
        depth -= 1
    return out


_LINES = {}  # (id(code), offset) -> (code, line): every collective resolves its caller's frames for its peers


def _line(code, lasti):
    hit = _LINES.get((id(code), lasti))
    if hit is not None and hit[0] is code:  # (the entry keeps its code alive, so the id is not reused)
        return hit[1]
    line = code.co_firstlineno
    for start, end, ln in code.co_lines():
        if start <= lasti < end:
            line = ln if ln is not None else code.co_firstlineno
            break
    if len(_LINES) > 100_000:
        _LINES.clear()
    _LINES[(id(code), lasti)] = (code, line)
    return line


# torch's own libraries that order device work (FSDP, DDP, DTensor, functional collectives): a
# missing edge can be in their code, so a report shows their frames; the rest of torch is plumbing (dispatch,
# nn.Module's call, autograd, the optimizers' math) between the program and the op, and so is torch.distributed's API itself (the
# program's call of dist.all_reduce is the frame that matters, not the function it called)
_TORCH_LIBRARIES = ("distributed", "nn/parallel")
_TORCH_API = ("distributed/distributed_c10d.py", "distributed/c10d_logger.py")


_PLUMBING = {}  # file name -> whether its frames are plumbing (decided once per file)
# decorator shims installed beside the program (torch's @deprecated wraps dist.all_gather_into_tensor in
# typing_extensions' wrapper): their frames are no program's, and their line numbers change with the shim's version
_SHIMS = ("typing_extensions.py",)


def _is_plumbing(filename):
    """Frames of simdist, of torch's machinery, of Python's standard library (contextlib's __exit__, functools,
    threading) and of <frozen>/<string> code (the fork server's `python -c`) are not the program's or a library's."""
    verdict = _PLUMBING.get(filename)
    if verdict is None:
        simdist_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
        spec = importlib.util.find_spec("torch")
        torch_dir = (os.path.dirname(spec.origin) if spec is not None and spec.origin else "\0") + os.sep
        stdlib = os.path.dirname(threading.__file__) + os.sep
        if filename.startswith("<") or filename.startswith(simdist_dir) or os.path.basename(filename) in _SHIMS:
            verdict = True
        elif filename.startswith(torch_dir):
            rel = filename[len(torch_dir):].replace(os.sep, "/")
            verdict = rel in _TORCH_API or not any(rel.startswith(lib + "/") for lib in _TORCH_LIBRARIES)
        else:
            verdict = filename.startswith(stdlib) and "-packages" + os.sep not in filename[len(stdlib):]
        _PLUMBING[filename] = verdict
    return verdict


def user_frames(frames, limit=6):
    """The innermost frames that belong to the program under test (or a library it uses), as (file, line,
    function)."""
    out = []
    frames = frames or ()
    for i in range(0, len(frames) - 1, 2):
        code, lasti = frames[i], frames[i + 1]
        if _is_plumbing(code.co_filename):
            continue
        out.append((code.co_filename, _line(code, lasti), code.co_name))
        if len(out) >= limit:
            break
    return out


def format_frames(frames, indent="    "):
    """The user frames as a traceback-like text."""
    return format_frame_tuples(user_frames(frames), indent)


def format_frame_tuples(frames, indent="    "):
    """Like format_frames, for frames already resolved to (file, line, function) tuples (they travel between
    ranks in messages)."""
    if not frames:
        return indent + "(no user frame)"
    lines = []
    for fn, line, name in frames:
        lines.append(f'{indent}File "{fn}", line {line}, in {name}')
        src = linecache.getline(fn, line).strip()
        if src:
            lines.append(f"{indent}  {src}")
    return "\n".join(lines)


class FrameRef:
    """A resolved frame that crosses a process boundary (code objects do not pickle): what user_frames reads of a
    code object, with the line fixed."""

    __slots__ = ("co_filename", "co_name", "co_firstlineno")

    def __init__(self, filename, name, line):
        self.co_filename, self.co_name, self.co_firstlineno = filename, name, line

    def co_lines(self):
        return ((0, 1, self.co_firstlineno),)


def portable_frames(frames):
    """`frames` as captured (code, offset, code, offset...) with each code replaced by a FrameRef."""
    out = []
    for i in range(0, len(frames or ()) - 1, 2):
        code, lasti = frames[i], frames[i + 1]
        out += [FrameRef(code.co_filename, code.co_name, _line(code, lasti)), 0]
    return out
