"""What ab_two_rows.py and ab_prefetch.py share: run `python -m engine bench` with this process's arguments, calling
``switch(method)`` before each generation's run and ``switch(None)`` after it (a kernel knob set per method)."""
import sys

from engine.bench import runner


def run_with(switch) -> None:
    run_one = runner.run_one

    def run_one_switched(decoder, method, *args, **kwargs):
        switch(method)
        try:
            return run_one(decoder, method, *args, **kwargs)
        finally:
            switch(None)

    runner.run_one = run_one_switched
    from engine.cli import main  # noqa: PLC0415

    sys.argv = ["engine"] + sys.argv[1:]
    main()
