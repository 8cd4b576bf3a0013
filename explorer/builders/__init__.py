"""The app's pure builders: Plotly figures, pandas tables, parsing of what a person types,
hand edits of a plan and the teaching text. No Streamlit here: tested without it."""
