"""Everything Textual: screens, widgets, keys, layout, and the patches of Textual's behaviour."""
