"""The KRaft controller: quorum, metadata image, placement and election."""
