
#
USER:RuntimeErrorboom *£ý³Ø