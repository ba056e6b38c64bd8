"""The HTML report: the statistics job, charts and media previews, and the page."""
