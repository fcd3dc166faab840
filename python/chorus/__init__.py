"""Chorus: MPI-style collectives for CPUs and commodity networks.

``chorus.Communicator`` runs collectives on buffer-protocol objects (numpy
arrays) for programs that do not use torch; ``import chorus.torch``
registers the torch.distributed backend ``"chorus"``.
"""
from ._chorus import ANY_SOURCE, Communicator, Error, Work

__all__ = ["ANY_SOURCE", "Communicator", "Error", "Work"]
