"""Sphinx extension: encrypt the transport of the kernels that execute the chapters.

jupyter_client (8.10 here) starts kernels over TCP without CurveZMQ keys unless its
``KernelManager.transport_encryption`` says otherwise, and ipykernel (7.4 here) then
prints "Kernel is running over TCP without encryption ... susceptible to eavesdropping"
once per executed chapter: eight warnings in the log of every book build that are
about the build tool, not the book. With ``"auto"`` the kernel manager provisions the
keys when the kernel declares support and keeps the old behaviour
otherwise. Only the process that builds the book is affected (the default of the trait
is changed here, at the extension's setup); older jupyter_client versions, without the
trait, and pyzmq without CurveZMQ are left as they are.
"""
from __future__ import annotations


def prefer_encrypted_kernels() -> bool:
    """Make ``"auto"`` the default transport encryption of jupyter_client's kernel managers.

    Returns
    -------
    bool
        Whether the default was changed (False where jupyter_client has no such setting
        or pyzmq lacks CurveZMQ).
    """
    import zmq
    from jupyter_client.manager import KernelManager

    if "transport_encryption" not in KernelManager.class_trait_names() or not zmq.has("curve"):
        return False
    KernelManager.transport_encryption.default_value = "auto"
    return True


def setup(app):
    prefer_encrypted_kernels()
    return {"parallel_read_safe": True, "parallel_write_safe": True}
