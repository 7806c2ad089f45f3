"""A shared classroom server's policy, UI-free: what one session may make the server do
(the numbers are in ``tfviz.limits``).

    disk      private session folders (0700/0600), a server-wide quota, expiry of idle sessions,
              the sweep of temp files left by killed processes
    uploads   a student's checkpoint upload: checked fully, kept privately, within the quotas
    cache     loaded models shared by every session, bounded by memory
    teacher   the teacher key: a minimum length, one check per second server-wide, failures logged
"""
