"""Tests of vfl/obs: what a run logs, shows and plots, and the API's progress."""
