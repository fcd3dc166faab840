"""Registers Chorus as the torch.distributed backend ``"chorus"``.

    import chorus.torch
    torch.distributed.init_process_group("chorus")   # env://, tcp://, store=...

Everything torch's rendezvous gives (env://, tcp://, a TCPStore or FileStore
passed in, torchrun) works: the Chorus communicator bootstraps through
torch's store. CPU tensors only.
"""
import torch.distributed as _dist

from . import _torch

BACKEND = "chorus"


def _create(store, rank, size, timeout):
    return _torch.create_process_group(store, rank, size, timeout)


def transport_name(group=None):
    """The transport ("ucx" or "tcp") a chorus process group runs over."""
    pg = group if group is not None else _dist.distributed_c10d._get_default_group()
    return _torch.transport_name(pg)


if BACKEND.upper() not in _dist.Backend._plugins:
    _dist.Backend.register_backend(BACKEND, _create)
