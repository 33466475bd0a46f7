"""A chat-template worker process's side: render what the parent sends until it goes away.

model/text/template_worker.py starts it (`python -I`, importing only jinja2 and the template
modules, never torch) and keeps it at arm's length: the parent reads a tag byte and UTF-8 text,
never a pickle, and kills it past a render's deadline. Here it caps its own address space and CPU
time, so a render that allocates too much fails with a MemoryError and one whose parent died
cannot run on for long.
"""

from __future__ import annotations

import gc
import math
import pickle
from multiprocessing.connection import Connection
from typing import Any

from model.errors import ChatTemplateError, TemplateRefusal
from model.text.chat_template import ChatTemplate
from model.text.template_worker import (
    CPU_MARGIN,
    FAILURE,
    READY,
    REFUSAL,
    TEXT,
    WARM_TEMPLATES,
    WORKER_MEMORY_LIMIT,
)


def serve(fd: int) -> None:
    """The worker's loop: render what the parent sends until it goes away."""
    import resource

    conn = Connection(fd)
    resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY_LIMIT, WORKER_MEMORY_LIMIT))
    conn.send_bytes(READY)
    templates: dict[str, ChatTemplate] = {}
    while True:
        try:
            source, context, time_limit = pickle.loads(conn.recv_bytes())
        except EOFError:
            return
        _limit_cpu(resource, time_limit)
        try:
            if source not in templates:
                if len(templates) >= WARM_TEMPLATES:
                    templates.clear()
                templates[source] = ChatTemplate(source)
            template = templates[source]
            reply = TEXT + template.render_here(context, time_limit).encode("utf-8", "surrogatepass")
        except TemplateRefusal as exc:
            reply = REFUSAL + str(exc).encode("utf-8", "surrogatepass")
        except ChatTemplateError as exc:
            reply = FAILURE + str(exc).encode("utf-8", "surrogatepass")
        except Exception as exc:  # a template that does not compile here either
            reply = FAILURE + f"the chat template failed ({type(exc).__name__})".encode()
        if reply[:1] == FAILURE:
            # A failed render's frames sit in reference cycles with what it allocated (up to the
            # whole address-space limit after a MemoryError) until a collection: without one the
            # next render, however small, may find no memory left.
            gc.collect()
        conn.send_bytes(reply)


def _limit_cpu(resource: Any, time_limit: float) -> None:
    """This render may use the CPU for its deadline and CPU_MARGIN more; then the kernel ends the worker."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    used = usage.ru_utime + usage.ru_stime
    soft = math.ceil(used + time_limit) + CPU_MARGIN
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard == resource.RLIM_INFINITY or soft <= hard:
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
