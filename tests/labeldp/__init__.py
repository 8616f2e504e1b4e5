"""Tests of vfl/labeldp in runs: the label-DP release, training, selection and the follower-view attacks."""
