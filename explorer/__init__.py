"""Partition Explorer's Streamlit app: a thin router and panels over pure builders.

``builders/`` import no Streamlit and are tested on their own: figures and tables of a plan,
each page's numbers (``pipeline_tables``, ``sharding_tables``, ``stepping``, ...), parsing of what
a person types (``inputs``), a shared link's checks (``links``), hand edits of a plan's mapping
(``editing``, a frozen ``Edit``) and the teaching text. The Streamlit side: ``app`` (the router),
``sidebar`` and ``devices_panel`` (``*_ui()`` widget readers), ``state`` (what the pages share, and
the link's settings Streamlit's own URL binding does not hold), ``compute`` (cached tracing and
planning), ``panels`` (``render_*`` drawers) and ``views/`` (one script per page). Start it with
``streamlit run explorer/app.py``.
"""
