"""Partition Explorer: ``streamlit run explorer/app.py`` (add ``-- --allow-user-models`` to let
people load their own ``package.module:factory`` models).

The router: the sidebar (model, devices, mode) is drawn here on every page so nothing entered
is lost when moving between pages; each page is one script in ``views/``.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `streamlit run explorer/app.py` runs this file as a script
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402

from explorer import loading, shutdown, sidebar, state  # noqa: E402

st.set_page_config(page_title="Partition Explorer", page_icon=":material/account_tree:", layout="wide")

# (script, title, icon, the name its view goes by in the URL's keys: explorer.builders.links.PAGE_PREFIXES)
VIEWS = [
    ("views/explore.py", "Explore", ":material/account_tree:", "explore"),
    ("views/cluster.py", "Plan a cluster", ":material/dns:", "cluster"),  # the buyer's question, second
    ("views/techniques.py", "Techniques", ":material/compare:", "techniques"),
    ("views/compare.py", "Compare modes", ":material/bar_chart:", "compare"),
    ("views/review.py", "Review & edit", ":material/edit_note:", "review"),
    ("views/pipeline.py", "Pipeline", ":material/view_timeline:", "pipeline"),
    ("views/training.py", "Training memory", ":material/memory:", "training"),
    ("views/sharding.py", "Sharding", ":material/grid_view:", "sharding"),
    ("views/learn.py", "Learn", ":material/school:", "learn"),
]
PAGES = [st.Page(script, title=title, icon=icon, default=i == 0) for i, (script, title, icon, _) in enumerate(VIEWS)]
NAMES = {title: name for _, title, _, name in VIEWS}

shutdown.install_exit_hook()  # SIGTERM mid-run: no abort (NOTE: [Stopping while a script runs])
page = st.navigation(PAGES, position="top")
state.set_page(NAMES.get(page.title, ""))
# Above the page, each in a container there on every run, so the page's widgets keep their places
# (loading.load_graph): the link's notes, the size warning, the link's keys no widget holds.
notes, warnings, link_notes = st.container(), st.container(), st.container()
with notes:
    state.restore_from_url()
state.follow_page_request()
state.set_config(sidebar.config_ui())
state.write_url()
with warnings:
    loading.show_size_warning()
page.run()
state.show_bound_notes(link_notes)
