"""Reusable widgets of the control panel."""
