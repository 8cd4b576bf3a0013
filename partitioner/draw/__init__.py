"""DOT builders: the shared vocabulary (:mod:`.dot`), the partition DAG (:mod:`.dag`), node graphs
(:mod:`.nodeview`), the model folded by module (:mod:`.collapse`) and colour overlays
(:mod:`.overlay`). Plain strings: no graphviz import; :func:`.dag.render_dot` runs the binary."""
