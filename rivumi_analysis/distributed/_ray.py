"""The Ray Data adapter: schedule chunks, stream their small result tables back.

Imported only when ``engine="ray"`` is asked for (extra ``rivumi-analysis[ray]``). The
adapter does scheduling only: every chunk is processed by a module-level task function that
calls the same code as the local process pool.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from ._chunks import Chunk

DEFAULT_MAX_RETRIES = 3
"""Attempts after a worker died before a chunk is reported failed (Ray Data's default is -1:
retry forever, which would hang on a run that kills its worker every time)."""


def require_ray() -> Any:
    """Import ``ray`` (and ``ray.data``) or raise an ImportError saying which extra to install."""
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "engine='ray' needs Ray Data: pip install 'rivumi-analysis[ray]'") from exc
    return ray


def ensure_ray(init_kwargs: dict[str, Any] | None = None) -> tuple[bool, float]:
    """Connect to Ray unless already connected; return (started here, seconds it took).

    ``ray.init()`` without an address uses ``RAY_ADDRESS`` when set (``ray job submit`` sets
    it), else a cluster started by ``ray start`` on this machine, else a new local one.
    """
    ray = require_ray()
    if ray.is_initialized():
        return False, 0.0
    t0 = time.perf_counter()
    kwargs: dict[str, Any] = {"logging_level": logging.ERROR}
    kwargs.update(init_kwargs or {})
    ray.init(**kwargs)
    quiet_ray_data()
    return True, time.perf_counter() - t0


def quiet_ray_data() -> None:
    """Ray Data logs INFO lines per dataset on the driver; keep warnings and errors only."""
    logging.getLogger("ray.data").setLevel(logging.WARNING)


def chunk_dataset(chunks: list[Chunk], task: Callable[..., Any], *,
                  fn_kwargs: dict[str, Any] | None = None,
                  ray_remote_args: dict[str, Any] | None = None) -> Any:
    """``from_items(chunks).map_batches(task, batch_format="pyarrow", batch_size=1)``.

    One block per chunk (so one task per chunk and few block statistics on the driver);
    retries are bounded; a block that still fails is dropped by Ray and then reported by
    the caller from the missing chunk key (never silently lost).
    """
    return item_dataset([c.to_item() for c in chunks], task, fn_kwargs=fn_kwargs,
                        ray_remote_args=ray_remote_args)


def item_dataset(items: list[dict[str, Any]], task: Callable[..., Any], *,
                 fn_kwargs: dict[str, Any] | None = None,
                 ray_remote_args: dict[str, Any] | None = None) -> Any:
    """``from_items(items).map_batches(task, ...)``: one block and one task per item."""
    ray = require_ray()
    remote = {"max_retries": DEFAULT_MAX_RETRIES}
    remote.update(ray_remote_args or {})
    ds = ray.data.from_items(items, override_num_blocks=max(1, len(items)))
    with warnings.catch_warnings():
        # max_retries has no named parameter yet; the **ray_remote_args form warns in 2.60
        warnings.filterwarnings("ignore", message=".*ray_remote_args.* is deprecated")
        ds = ds.map_batches(task, batch_format="pyarrow", batch_size=1, zero_copy_batch=True,
                            fn_kwargs=fn_kwargs or {}, **remote)
    ctx = ds.context
    ctx.enable_progress_bars = False
    ctx.max_errored_blocks = -1
    return ds


def iter_result_batches(ds: Any) -> Iterator[Any]:
    """The dataset's output blocks as ``pyarrow.Table``s, as they complete."""
    yield from ds.iter_batches(batch_size=None, batch_format="pyarrow", prefetch_batches=1)
