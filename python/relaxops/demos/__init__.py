"""First-run demos on data that ships with installed packages."""


def run_demo(family: str, steps=None) -> None:
    if family == "sort":
        from .sort import main
    elif family == "topk":
        from .topk import main
    else:
        raise ValueError(f"unknown demo {family!r}; available: sort, topk")
    main(steps=steps)
