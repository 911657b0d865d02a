import json,glob,os,sys
base=sys.argv[1]
for run in ['http-once','h2c-once','grpc-once','http-respect','open-loop']:
    for pdir in sorted(glob.glob(f'{base}/{run}/pass-*')):
        try:
            A=json.load(open(pdir+'/A.json'));D=json.load(open(pdir+'/D.json'))
        except Exception: continue
        out=[]
        for a,d in zip(A['phases'],D['phases']):
            out.append('%s %3.0f%% %.2fx' % (a['phase'][:4], 100*d['accepted_spans_per_s']/a['accepted_spans_per_s'], d['p99_ms']/a['p99_ms']))
        print(run, os.path.basename(pdir), ' | '.join(out))
