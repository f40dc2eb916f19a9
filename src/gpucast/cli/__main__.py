"""``python -m gpucast.cli``: the `gpucast` command."""

from gpucast.cli.app import main

main()
