"""The compile report: `EMBER_REPORT=dir` keeps one self-contained HTML page per process in `dir`, built only on
`ember_event` (like `EMBER_LOGS` and `EMBER_DUMP`). `ember report` lists the pages, `ember report --open` opens the
newest.

`ReportWriter(folder)` is the observer (ember-core's own plugin holds the one `EMBER_REPORT` turns on; register
another by hand to report a block of code); `Report` gathers events per compile, `PageRenderer` makes the page,
`list_reports(folder)` finds pages newest first.
"""

from ._model import Compile, Compiled, Report
from ._page import PageInfo, PageRenderer
from ._writer import ReportFile, ReportWriter, age, list_reports

__all__ = ["Compile", "Compiled", "PageInfo", "PageRenderer", "Report", "ReportFile", "ReportWriter", "age",
           "list_reports"]
