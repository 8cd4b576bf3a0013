"""Partition Explorer's Streamlit app: a thin router and panels over pure builders.

``figures`` (Plotly), ``tables`` (pandas), ``inputs`` (parsing what a person types or uploads),
``editing`` (hand edits of a plan's mapping), ``teaching`` (what each mode does) and
``config`` (the hashable description of one plan request) import no Streamlit and are tested
on their own; ``app`` (the router), ``sidebar`` (``*_ui()`` widget readers), ``compute``
(cached tracing and planning), ``panels`` (``render_*`` drawers) and ``views/`` (one script per
page) are the Streamlit side. Start it with ``streamlit run explorer/app.py``.
"""
