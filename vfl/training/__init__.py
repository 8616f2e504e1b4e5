"""Training-time policies shared by split training and the centralized reference: selection, schedules."""
