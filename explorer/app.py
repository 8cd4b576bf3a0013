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

import sample_models  # noqa: E402
from explorer import sidebar, state

st.set_page_config(page_title="Partition Explorer", page_icon=":material/account_tree:", layout="wide")

PAGES = [
    st.Page("views/explore.py", title="Explore", icon=":material/account_tree:", default=True),
    st.Page("views/compare.py", title="Compare modes", icon=":material/bar_chart:"),
    st.Page("views/review.py", title="Review & edit plan", icon=":material/edit_note:"),
    st.Page("views/pipeline.py", title="Pipeline", icon=":material/view_timeline:"),
    st.Page("views/training.py", title="Training memory", icon=":material/memory:"),
    st.Page("views/sharding.py", title="Sharding", icon=":material/grid_view:"),
    st.Page("views/cluster.py", title="Plan a cluster", icon=":material/dns:"),
    st.Page("views/learn.py", title="Learn", icon=":material/school:"),
]

page = st.navigation(PAGES, position="top")
state.restore_from_url(sample_models.names(), sidebar.PLAN_MODES, sidebar.default_device_controls)
state.keep_widget_state()
state.follow_page_request()
state.set_config(sidebar.config_ui())
state.write_url()
page.run()
