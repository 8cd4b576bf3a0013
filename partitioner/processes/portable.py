"""An fx module made ready to send to the ranks: the one change pickling needs. Low in the house
(the pipeline's stage builder, the composed runs and the plan's runtime read it), so none of them
reaches up or across for it."""

from __future__ import annotations

from torch import fx

__all__ = ["picklable"]


def picklable(gm: fx.GraphModule) -> fx.GraphModule:
    """Drop type annotations that are strings (a model written with ``from __future__ import
    annotations``): fx would emit them as globals that cannot be pickled for the ranks."""
    for module in [gm, *gm.modules()]:
        if isinstance(module, fx.GraphModule):
            changed = False
            for n in module.graph.nodes:
                if isinstance(n.type, str):
                    n.type = None
                    changed = True
            if changed:
                module.recompile()
    return gm
