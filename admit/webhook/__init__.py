"""The webhook path: parse an AdmissionReview (``admissionreview``), decide what to patch (``mutate``) and whether
to allow (``validate``, ``rollout``), ensure the gang's objects under one deadline (``admission``), and serve it over
HTTPS with aiohttp (``app``, ``connections``).
"""
