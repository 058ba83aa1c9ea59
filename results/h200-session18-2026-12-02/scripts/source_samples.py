import csv, sys, collections
rows=list(csv.reader(open(sys.argv[1])))
i=0
while 'Source' not in rows[i]: i+=1
hdr=rows[i]; data=rows[i+1:]
H={h:k for k,h in enumerate(hdr)}
stalls=[h for h in hdr if h.startswith('stall_') and 'Not Issued' not in h]
def num(x):
    try: return float(x.replace(',',''))
    except: return 0.0
tot=sum(num(r[H['Warp Stall Sampling (All Samples)']]) for r in data)
print('total samples', tot, 'instructions', len(data))
top=sorted(data,key=lambda r:-num(r[H['Warp Stall Sampling (All Samples)']]))[:int(sys.argv[2]) if len(sys.argv)>2 else 25]
for r in top:
    s=num(r[H['Warp Stall Sampling (All Samples)']])
    br=sorted(((num(r[H[x]]),x[6:]) for x in stalls),reverse=True)[:3]
    print(f"{r[0]:>6} {s/tot*100:5.1f}% {r[1][:60]:60s} {' '.join(f'{n}:{v:.0f}' for v,n in br)}")
# aggregate by stall reason
agg=collections.Counter()
for r in data:
    for x in stalls: agg[x[6:]]+=num(r[H[x]])
print({k:round(v/tot*100,1) for k,v in agg.most_common(10)})
