"""Issue 56: tables readable at 1,280 px. Techniques is a static table (its texts wrap); Explore's
partitions come as two tables of at most eight columns; the Pipeline page's stage table leaves out
the columns that say nothing and sets widths that add up to the page's."""

from __future__ import annotations

from app_helpers import errors, start

from explorer.panels import PARTITION_PLACE


def test_explore_splits_the_partition_table_in_two_readable_ones():
    at = start()
    assert not at.exception and not errors(at)
    frames = [df.value for df in at.dataframe]
    place = next(f for f in frames if "Critical path" in f.columns)
    times = next(f for f in frames if "Finish" in f.columns)
    assert list(place.columns) == PARTITION_PLACE
    assert list(times.columns) == [
        "Partition",
        "Latency",
        "Compute",
        "Memory time",
        "Transfer in",
        "Start",
        "Finish",
    ]
    assert list(place["Partition"]) == list(times["Partition"])


def test_the_techniques_table_is_static_and_the_stage_table_fits_1280_px():
    at = start()
    at.switch_page("views/techniques.py").run()
    assert not at.exception and not errors(at)
    assert len(at.table) == 1 and "technique" in at.table[0].value.columns  # st.table wraps its texts
    assert not [df for df in at.dataframe if "technique" in df.value.columns]
    at.switch_page("views/pipeline.py").run()
    assert not at.exception and not errors(at)
    stages = next(df for df in at.dataframe if "Stashed" in df.value.columns)
    assert "Backward" not in stages.value.columns and "Device holds" not in stages.value.columns
    from explorer.views.pipeline import STAGE_COLUMNS

    widths = [STAGE_COLUMNS[c]["width"] for c in stages.value.columns]
    assert sum(widths) <= 760  # the main column at 1,280 px with the sidebar open
