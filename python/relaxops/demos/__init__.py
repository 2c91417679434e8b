"""First-run demos on data that ships with installed packages."""


def run_demo(family: str, steps=None, **options) -> None:
    """Runs a demo; ``options``: seed (topk, logic, render), method (topk)."""
    if family == "sort":
        from .sort import main
    elif family == "topk":
        from .topk import main
    elif family == "logic":
        from .logic import main
    elif family == "render":
        from .render import main
    else:
        raise ValueError(f"unknown demo {family!r}; available: sort, topk, logic, render")
    main(steps=steps, **options)
