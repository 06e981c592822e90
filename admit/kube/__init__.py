"""The only code that talks to kube-apiserver: the REST client and the calls admission makes (``client``), and the
list+watch cache the controller uses (``watchcache``). Knows nothing of gangs or AdmissionReviews.
"""
