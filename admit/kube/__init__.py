"""The only code that talks to kube-apiserver: the API client admission uses (``client``) and the list+watch cache
with its raw REST client the controller uses (``watchcache``). Knows nothing of gangs or AdmissionReviews.
"""
