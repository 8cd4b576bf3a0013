"""The app's pure builders: Plotly figures, pandas tables, each page's numbers, parsing of what a
person types, a link's checks, hand edits of a plan and the teaching text. No Streamlit here:
tested without it."""
