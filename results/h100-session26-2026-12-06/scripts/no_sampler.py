"""`python3 results/h100-session26-2026-12-06/scripts/no_sampler.py train ...`: the workbench CLI with
the power meter's sampling thread left off (PowerMeter.start a no-op), so each step's figure is one
read at the same point of the step, as the trainer did at 07eb988: the control for whether the
sampling thread costs the step anything."""
import workbench.power as power

power.PowerMeter.start = lambda self, every_s=None: None

from workbench.cli import main  # noqa: E402

main()
