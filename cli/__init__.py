"""The command line, ``partition-explorer``: an application on the ``partitioner`` library, beside
the Streamlit app. ``main.py`` parses and dispatches; ``commands.py`` (and one module per further
command family) holds the commands; ``inputs.py`` reads models, devices and files; ``report.py``
and ``diff_report.py`` lay out text."""
