"""Numeric widgets whose values the app checks itself (components.inputs).

Gradio's own Slider and Number check a value before the app sees it, and a value of the wrong type (text or
null sent through the API) makes that check raise a TypeError, which reaches the visitor as a bare "Error".
These pass the value on unchanged, so that the app's checks name the setting and say what is allowed.
`is_template` is Gradio's mark for a subclass that draws with its parent's frontend (as gr.TextArea does).
"""
from __future__ import annotations

from typing import Any

import gradio as gr


class CheckedSlider(gr.Slider):
    is_template = True

    def preprocess(self, payload: Any) -> Any:
        return payload


class CheckedNumber(gr.Number):
    is_template = True

    def preprocess(self, payload: Any) -> Any:
        return payload
