"""The trainer's console output (rich), as `workbench train` shows it; trainer.py calls it."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from workbench.power import describe


class TrainUI:
    """What `workbench train` prints on rank 0: the run's parameters, the model, memory, each step
    (the other ranks print nothing: trainer.SilentUI)."""

    def __init__(self, console):
        self.console = console

    def run_table(self, rows: list[tuple[str, Any]]) -> None:
        t = Table(title="run", title_justify="left", box=None)
        t.add_column("parameter", style="bold")
        t.add_column("value")
        for k, v in rows:
            t.add_row(k, escape(str(v)))
        self.console.print(t)

    def model_table(self, cfg) -> None:
        t = Table(title="model", title_justify="left")
        for col in ("max T", "V", "padded V", "L", "NH", "C", "parameters"):
            t.add_column(col, justify="right")
        t.add_row(str(cfg.max_seq_len), str(cfg.vocab_size), str(cfg.padded_vocab_size), str(cfg.num_layers),
                  str(cfg.num_heads), str(cfg.channels), f"{cfg.num_parameters:,}")
        self.console.print(t)

    def device_line(self, name: str, kind: str, peak: float) -> None:
        """kind: the matmuls' arithmetic (fp32, tf32 or bf16), whose measured peak MFU is against."""
        self.console.print(f"[bold]device[/] {escape(name)}; matmuls in {kind}; measured {kind} matmul peak "
                           f"{peak:.0f} TFLOP/s (cuBLASLt at 8192^3, sustained, random operands) for MFU")

    def memory_table(self, memory: dict[str, int], groups: dict[str, int] | None = None) -> None:
        t = Table(title="device memory", title_justify="left")
        t.add_column("buffer")
        t.add_column("MiB", justify="right")
        for name, nbytes in sorted(memory.items(), key=lambda kv: -kv[1]):
            if nbytes >= 1 << 20:
                t.add_row(name, f"{nbytes / 2**20:,.1f}")
        t.add_row("[bold]total[/]", f"[bold]{sum(memory.values()) / 2**20:,.1f}[/]")
        self.console.print(t)
        if groups:
            self.console.print("[bold]by kind[/] " + ", ".join(f"{k} {v / 2**30:.2f} GiB" for k, v in groups.items()))

    def step(self, r, total: int) -> None:
        self.console.print(f"step {r.step:4d}/{total}: train loss {r.loss:.6f} ({r.ms:.1f} ms, {r.tokens_per_s:,.0f} tok/s, "
                           f"MFU {r.mfu:.1f}%, host {r.host_us:.0f} µs outside the graph)")

    def val(self, step: int, loss: float) -> None:
        self.console.print(f"[cyan]val loss {loss:.6f}[/] at step {step}")

    def sample(self, step: int, text: str) -> None:
        self.console.print(Panel(escape(text), title=f"sample at step {step}", title_align="left"))

    def note(self, text: str) -> None:
        self.console.print(f"[yellow]{escape(text)}[/]")

    def summary(self, s: dict) -> None:
        if "gpu_memory_used" in s:
            m = s.get("memory", {})
            mine = (f" (this run: {m['run_after_capture'] / 2**30:.2f} GiB, {m['buffers'] / 2**30:.2f} of it buffers, "
                    f"{m['activations'] / 2**30:.2f} activations at --recompute {m['recompute']})"
                    if "run_after_capture" in m else "")
            self.console.print(f"[bold]GPU memory in use[/] after capture: {s['gpu_memory_used'] / 2**30:.2f} GiB" + mine)
        if "median_ms" in s:
            self.console.print(f"[bold]average step[/] ({s['window']}, median): {s['median_ms']:.2f} ms, "
                               f"{s['median_tokens_per_s']:,.0f} tok/s, MFU {s['median_mfu']:.1f}%, "
                               f"host {s['median_host_us']:.0f} µs per step outside the graph")
        if s.get("power"):
            self.console.print(f"[bold]GPU power[/] over the same steps: {escape(describe(s['power']))}")
