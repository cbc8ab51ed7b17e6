"""The backend SDK: what every device backend shares, so it writes only its device's part.

- ``runtime``: importing the device SDK and reporting a missing runtime
  (``RuntimeUnavailable``, an ``Availability`` with the failing step).
- ``trace``: ``LaunchTrace``, what a provider actually ran (kernels,
  submissions, fallbacks).
"""
